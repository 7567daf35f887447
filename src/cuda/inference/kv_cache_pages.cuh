// kv_cache_pages.cuh — where key t of sequence b lives, on the device (kv_cache_params.hpp):
// the clamped cache length and page lookups shared by the attention and append kernels. Plain
// loads only, so the append kernel compiles for every architecture.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/inference/kv_cache_params.hpp"

namespace fastattn::cuda {

// Position of appended token t of sequence b: seqlens[b] + t, unclamped (null seqlens: the
// capacity, so nothing is appended). The append writes it only inside [0, capacity), as the CPU
// append does (src/cpu/kv_cache.cpp).
__device__ __forceinline__ long long kv_append_position(const KVCacheParams& p, int b, int t) {
  const long long held = p.seqlens == nullptr ? static_cast<long long>(p.capacity) : static_cast<long long>(p.seqlens[b]);
  return held + t;
}

// Tokens the attention of sequence b sees: seqlens[b] + seqlen_new clamped to [0, capacity], in
// the CPU's order (src/cpu/decode_keys.hpp: DecodeKeys::length); null seqlens: the capacity. A
// paged cache without pages holds nothing.
__device__ __forceinline__ int kv_cache_length(const KVCacheParams& p, int b) {
  if (p.block_table != nullptr && p.num_pages < 1) return 0;  // no page to read
  if (p.seqlens == nullptr) return p.capacity;
  const long long n = static_cast<long long>(p.seqlens[b]) + p.seqlen_new;
  return static_cast<int>(min(max(n, 0LL), static_cast<long long>(p.capacity)));
}

// Whether a tile of block_n keys reads its block-table entries once per page and shares them by
// warp shuffles (kv_cache_loads.cuh, TileRows::fetch: up to 64 pages, two entries per lane),
// rather than once per row: page sizes that divide the tile into at most 64 pages.
__host__ __device__ constexpr bool kv_pages_shared_by_shuffles(int block_n, int page_size) {
  return page_size > 0 && block_n % page_size == 0 && block_n / page_size <= 64;
}

// Index of the page holding key t (t / page_size): a shift where page_size is a power of two
// (KVCacheParams::page_shift; an integer division costs about 25 instructions).
__device__ __forceinline__ int kv_page_index(const KVCacheParams& p, int t) {
  return p.page_shift >= 0 ? t >> p.page_shift : t / p.page_size;
}

// Raw block-table entry: page `page_index` of sequence b (paged caches only), unchecked.
__device__ __forceinline__ int kv_page_entry(const KVCacheParams& p, int b, int page_index) {
  return p.block_table[static_cast<std::int64_t>(b) * p.block_table_stride + page_index];
}

// A block-table entry made safe for reads (paged caches only, num_pages >= 1): clamped into
// [0, num_pages), so a bad entry reads some page, never outside the cache. The attention reads
// the raw entry a main-loop iteration before it clamps it (kv_cache_loads.cuh, TileRows). The
// append does not clamp: it skips a bad entry (kv_cache.cu).
__device__ __forceinline__ int kv_clamp_page(const KVCacheParams& p, int entry) {
  return min(max(entry, 0), p.num_pages - 1);
}

}  // namespace fastattn::cuda
