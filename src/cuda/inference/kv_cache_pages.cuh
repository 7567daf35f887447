// kv_cache_pages.cuh — where key t of sequence b lives, on the device (kv_cache_params.hpp):
// the clamped cache length and page lookups shared by the attention and append kernels. Plain
// loads only, so the append kernel compiles for every architecture.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/inference/kv_cache_params.hpp"

namespace fastattn::cuda {

// Tokens held before this call's append: seqlens[b] clamped to [0, capacity] (null: capacity).
__device__ __forceinline__ int kv_cache_held(const KVCacheParams& p, int b) {
  if (p.seqlens == nullptr) return p.capacity;
  return static_cast<int>(min(max(static_cast<long long>(p.seqlens[b]), 0LL), static_cast<long long>(p.capacity)));
}

// Tokens the attention of sequence b sees: held + seqlen_new, at most the capacity.
__device__ __forceinline__ int kv_cache_length(const KVCacheParams& p, int b) {
  return static_cast<int>(min(static_cast<long long>(kv_cache_held(p, b)) + p.seqlen_new,
                              static_cast<long long>(p.capacity)));
}

// Page `page_index` of sequence b (paged caches only), clamped into [0, num_pages).
__device__ __forceinline__ int kv_page(const KVCacheParams& p, int b, int page_index) {
  const int page = p.block_table[static_cast<std::int64_t>(b) * p.block_table_stride + page_index];
  return min(max(page, 0), p.num_pages - 1);
}

}  // namespace fastattn::cuda
