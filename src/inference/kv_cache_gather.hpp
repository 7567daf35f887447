// kv_cache_gather.hpp — a KV-cache call (kv_cache_problem.hpp) as a plain forward() problem over
// contiguous host copies: the float64 reference of KV-cache calls (Backend::reference) and the
// oracle of the tests (tests/kv_cache_test.cpp) run reference::forward_f64 on it.
#pragma once

#include <cstdint>
#include <vector>

#include "common/problem.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn {

// q as [batch * seqlen_q, num_heads, head_dim]; k, v as [total, num_kv_heads, head_dim] holding
// each sequence's cache tokens 0 .. seqlens[b] - 1 followed by its appended tokens (read from
// append.k / append.v, so it does not matter whether the append was written into the cache
// yet); varlen offsets cu_seqlens_q = b * seqlen_q, cu_seqlens_k by those lengths. In the call's
// dtype, bit for bit. Lengths and pages are clamped like the kernels' (decode_keys.hpp).
// Host pointers only.
struct GatheredKVCache {
  std::vector<unsigned char> q, k, v;
  std::vector<std::int32_t> cu_seqlens_q, cu_seqlens_k;
  AttentionProblem problem;  // varlen over the vectors above; out and lse null
};
GatheredKVCache gather_kv_cache(const KVCacheProblem& p);

// Backend::reference: float64 attention over gather_kv_cache(p), out and lse written in the
// call's layout and dtype. Does not append (the caller does, kv_cache_append).
void kv_cache_reference(const KVCacheProblem& p);

}  // namespace fastattn
