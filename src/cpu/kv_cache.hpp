// kv_cache.hpp — the CPU backend's KV-cache attention (fastattn/kv_cache.hpp): the append, and
// the prefill route for query counts beyond the decode kernel (chunked prefill). The decode
// route is the decode kernel itself reading the cache's pages (run_decode_plan with
// DecodeKeys, cpu_backend.hpp). The API layer (src/api/kv_cache.cpp) chooses and sizes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/cpu_backend.hpp"
#include "fastattn/options.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn::cpu {

// Writes append.k / append.v into the cache at tokens seqlens[b] .. seqlens[b] + seqlen_new - 1
// of each sequence, through the block table. Tokens outside [0, capacity) and pages outside
// [0, num_pages) are skipped (possible only in a plan's run, which does not check values).
void kv_cache_append(const KVCacheProblem& p, int threads);

// Keys a sequence of length `len` shows its queries: [first, len), first > 0 only with a
// bounded window_left (the bottom-right aligned window of query 0 starts there).
std::int64_t kv_cache_first_visible(const KVCacheProblem& p, std::int64_t len);

// Bytes of host scratch the prefill route needs for sequences of up to max_len keys: the
// visible keys of one paged sequence, K and V, [tokens, num_kv_heads, head_dim] in the call's
// dtype (0 for a contiguous cache, whose sequences are read in place).
std::size_t kv_cache_gather_bytes(const KVCacheProblem& p, std::int64_t max_len);

// The prefill route: per sequence, its visible keys (a paged cache's gathered into `gather`,
// kv_cache_gather_bytes(p, longest cache) bytes, 64-byte aligned; a contiguous cache's in
// place), then forward() of that one sequence with `forward_plan` (the dispatcher's
// prefill kernel for the call's dtype, head_dim and seqlen_q).
void kv_cache_gather_forward(const KVCacheProblem& p, const CpuKernelPlan& forward_plan, void* gather,
                             std::size_t gather_bytes);

}  // namespace fastattn::cpu
