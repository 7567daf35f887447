// kv_cache_params.hpp — what the KV-cache kernels read (kv_cache_kernel.cuh, kv_cache_combine.cuh,
// the append kernel in kv_cache.cu): plain values built on the host from a KVCacheProblem.
// Strides in elements, 64-bit; positions in 32 bits (the host checks capacity < 2^31).
//
// Key t of sequence b lives in page block_table[b * block_table_stride + t / page_size] (or page
// b when block_table is null: the contiguous cache, page_size = capacity) at row t % page_size.
// Values read from seqlens and block_table are checked on the device as the CPU checks them
// (kv_cache_pages.cuh): the attention sees seqlens[b] + seqlen_new keys clamped to [0, capacity]
// (none when a paged cache has no pages) and reads pages clamped to [0, num_pages); the append
// skips positions outside [0, capacity) and block-table entries outside [0, num_pages). So
// out-of-range values never reach memory outside the cache, nor another sequence's page.
#pragma once

#include <cstdint>

namespace fastattn::cuda {

struct KVCacheParams {
  const void* q;
  void* out;
  float* lse;  // null when not requested
  const void* k;
  const void* v;
  const void* k_new;  // append source, [batch, seqlen_new, kv_heads, head_dim]; null: none
  const void* v_new;

  std::int64_t q_batch_stride, q_token_stride, q_head_stride;
  std::int64_t o_batch_stride, o_token_stride, o_head_stride;
  std::int64_t lse_batch_stride, lse_head_stride, lse_token_stride;
  std::int64_t k_page_stride, k_token_stride, k_head_stride;
  std::int64_t v_page_stride, v_token_stride, v_head_stride;
  std::int64_t k_new_batch_stride, k_new_token_stride, k_new_head_stride;
  std::int64_t v_new_batch_stride, v_new_token_stride, v_new_head_stride;

  const std::int32_t* block_table;  // null: contiguous
  std::int64_t block_table_stride;
  const std::int32_t* seqlens;      // device; null: every sequence holds `capacity` keys (forward())
  int page_size;
  int page_shift;  // log2(page_size) when it is a power of two, else -1 (the kernel's shifts)
  int num_pages;
  int capacity;    // max_pages_per_seq * page_size
  int seqlen_new;  // appended tokens: the attention sees clamp(seqlens[b] + seqlen_new, 0, capacity) keys

  int batch;
  int num_heads;
  int num_kv_heads;
  int head_dim;
  int group;       // query heads per KV head
  int seqlen_q;
  int rows;        // group * seqlen_q: packed rows per (batch, KV head), row = token * group + head
  int row_blocks;  // ceil(rows / rows per tile)

  float scale_log2;         // softmax scale * log2(e); with softcap: log2(e)
  float softcap;            // 0: off
  float softcap_pre_scale;  // scale / softcap
  int window_left;          // -1: unbounded; clamped to int range on the host
  int window_right;
  bool bottom_right;

  int num_splits;  // 1: out written by the attention kernel; else partials + combine
  float* oaccum;   // (splits, batch, kv_heads, rows, head_dim) f32
  float* lseaccum; // (splits, batch, kv_heads, rows) f32
  bool out_f32;    // out is f32 (KVCacheProblem::out_f32: the cooperative step's partials)
  // Fused combine (kv_cache_heuristics.hpp: KVCombine::fused): arrival counters (batch,
  // kv_heads, row_blocks), zero before the launch and left zero after it; null: the combine
  // kernel merges the splits.
  int* split_counters;
};

}  // namespace fastattn::cuda
