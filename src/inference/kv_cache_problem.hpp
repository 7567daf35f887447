// kv_cache_problem.hpp — a validated KV-cache attention call, normalised for the kernels
// (CPU: src/cpu, CUDA: src/cuda/inference/kv_cache.hpp). Built by the API layer
// (src/api/kv_cache*.cpp) from fastattn/kv_cache.hpp's arguments.
//
// The contiguous cache is the paged one with one page per sequence: page_size = capacity,
// block_table null, page of sequence b = b. So every kernel addresses key t of sequence b as
//   page   = block_table ? block_table[b * block_table_stride + t / page_size] : b
//   k_elem = k.data + page * k_page_stride + (t % page_size) * k.stride.token + h * k.stride.head
#pragma once

#include <cstdint>

#include "common/problem.hpp"

namespace fastattn {

struct KVCacheProblem {
  // q, out, lse, dtype, device, batch, heads, head_dim, seqlen_q, scale, softcap, window,
  // alignment (bottom_right), threads, stream, workspace: as for forward(). attn.k / attn.v
  // hold the cache's data pointers and token / head strides (stride.batch unused: pages);
  // attn.seqlen_k is the capacity bound (max_pages_per_seq * page_size, or capacity);
  // cu_seqlens are null.
  AttentionProblem attn;

  std::int64_t k_page_stride = 0;  // elements between pages (contiguous: k's batch stride)
  std::int64_t v_page_stride = 0;
  std::int64_t page_size = 0;      // tokens per page (contiguous: capacity)
  std::int64_t num_pages = 0;      // pages in the cache (contiguous: batch)
  const std::int32_t* block_table = nullptr;  // null: contiguous
  std::int64_t block_table_stride = 0;        // elements between sequences' rows
  std::int64_t max_pages_per_seq = 0;         // contiguous: 1
  const std::int32_t* seqlens = nullptr;      // [batch], host or device as attn.device

  // Append (seqlen_new 0: none): [batch, seqlen_new, num_kv_heads, head_dim].
  Operand k_new, v_new;
  std::int64_t seqlen_new = 0;

  // out (only out) is f32 while attn.dtype is bf16 / f16: the unrounded partial outputs the
  // cooperative step merges (src/cooperative/partial_runner.hpp). Honoured by the decode
  // kernels (CPU decode kernel through DecodeKeys, CUDA KV-cache kernel); set by nothing else.
  bool out_f32 = false;

  std::int64_t capacity() const { return max_pages_per_seq * page_size; }
  bool is_paged() const { return block_table != nullptr; }
};

}  // namespace fastattn
