// kv_cache_loads.cuh — how the KV-cache kernels bring a K/V tile into shared memory
// (kv_cache_heuristics.hpp: KVLoad): the block-table lookups of a tile (TileRows, read an
// iteration ahead), the cp.async gathers, TMA box loads, and the zeroed tail rows of TMA tiles.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/inference/kv_cache_pages.cuh"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/inference/kv_cache_tma.cuh"
#include "cuda/sm80/copy.cuh"

namespace fastattn::cuda {

// Block-table lines are prefetched into L2 this many tiles before their pages are read: a
// table read that misses L2 under full memory load takes about as long as a tile, and the
// cp.async of the tile after next waits for it (measured before the prefetch, H200 2026-12-01,
// GQA 32/8 b16 kv 32k: page size 1 at 0.48x, 16 at 0.82x of the contiguous cache; 64 and 256,
// one table read per tile, at 1.0x).
constexpr int kTablePrefetchTiles = 4;

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

// This thread's copies of a K/V tile at chunk c, rows r0 + it * kRowStep of the tile. A tile in
// one page (the contiguous cache: page b; pages of a multiple of kBlockN tokens:
// TileRows::Lookup::one_page): rows first + r0 + it * kRowStep of the page (issue()); a tile of
// small pages (shared_pages): each copy's page and row in it (issue_pages()). From pointers set
// once per KV head (set()), a one-page tile's sources are a 64-bit offset of the page and its
// first row, then one 64-bit add per copy; the destinations lie at constant offsets from dst0
// (the swizzle repeats every 8 rows). The general path
// (issue_kv_tile over TileRows) computes page * page stride + row * token stride per copy,
// 64-bit, and selects a safe address for rows past the length: about 100 instructions for the
// 16 copies of a d-128 tile against about 50 here, and at one CTA per SM the stream is as fast as
// its four warps issue (kv_cache_kernel.cuh; H200, 2026-12-02, docs/inference-cuda-decode.md "Issue path").
// kApplies: the copies keep one chunk per thread (kThreads a multiple of a row's chunks) and step
// a multiple of 8 rows: d 64 and 128 (not 96: 12 chunks; not 256: 4-row steps); up to 64 rows
// (the 128-row tile of chunked prefill computes more per tile and is short of registers: its
// spills doubled with these copies).
template <class T>
struct PageRowCopies {
  using E = typename T::Element;
  static constexpr bool kApplies =
      T::kThreads % T::kChunks == 0 && (T::kThreads / T::kChunks) % 8 == 0 && T::kBlockM <= 64;
  static constexpr int kRowStep = kApplies ? T::kThreads / T::kChunks : 8;
  const E* k;  // row r0, chunk c of page 0 of this KV head
  const E* v;
  int64_t k_page, v_page;  // page strides
  int64_t k_row, v_row;    // token strides
  int64_t k_step, v_step;  // kRowStep rows
  int r0;
  uint32_t dst0;  // offset of (r0, c) in a K or V tile (T::Layout)

  __device__ __forceinline__ void set(const KVCacheParams& p, int kv_head, int tid) {
    r0 = tid / T::kChunks;
    const int c = tid % T::kChunks;
    k = static_cast<const E*>(p.k) + kv_head * p.k_head_stride + r0 * p.k_token_stride + c * 8;
    v = static_cast<const E*>(p.v) + kv_head * p.v_head_stride + r0 * p.v_token_stride + c * 8;
    k_page = p.k_page_stride;
    v_page = p.v_page_stride;
    k_row = p.k_token_stride;
    v_row = p.v_token_stride;
    k_step = kRowStep * p.k_token_stride;
    v_step = kRowStep * p.v_token_stride;
    dst0 = T::Layout::offset(r0, c);
  }

  // The tile of rows first .. first + kBlockN - 1 of `page` into the stage at sK (V at +
  // kSmemKV); valid_rows: its rows before the sequence's length (the rest zero-filled: their
  // cp.async reads 0 bytes, src-size 0 (PTX ISA "cp.async"), so their address, which may lie
  // past the cache's last row, is never dereferenced).
  __device__ __forceinline__ void issue(uint32_t sK, int page, int first, int valid_rows) const {
    const E* k_src = k + page * k_page + first * k_row;
    const E* v_src = v + page * v_page + first * v_row;
    const int rows_left = valid_rows - r0;
#pragma unroll
    for (int it = 0; it < T::kCopyIters; ++it) {
      const bool valid = it * kRowStep < rows_left;
      const uint32_t dst = sK + dst0 + it * kRowStep * T::kRowBytes;
      sm80::cp_async_16(dst, k_src, valid);
      sm80::cp_async_16(dst + T::kSmemKV, v_src, valid);
      k_src += k_step;
      v_src += v_step;
    }
  }

  // A tile of small pages (TileRows::Lookup::shared_pages: the page size divides kBlockN):
  // copy `it` (tile row r0 + it * kRowStep) from page[it] (resolved), row (r0 + it * kRowStep) &
  // page_mask of it; valid_rows as in issue().
  __device__ __forceinline__ void issue_pages(uint32_t sK, const int (&page)[T::kCopyIters], int page_mask,
                                              int valid_rows) const {
    const int rows_left = valid_rows - r0;
#pragma unroll
    for (int it = 0; it < T::kCopyIters; ++it) {
      const bool valid = it * kRowStep < rows_left;
      const uint32_t dst = sK + dst0 + it * kRowStep * T::kRowBytes;
      const int row_from_r0 = ((r0 + it * kRowStep) & page_mask) - r0;  // k / v hold row r0
      sm80::cp_async_16(dst, k + page[it] * k_page + row_from_r0 * k_row, valid);
      sm80::cp_async_16(dst + T::kSmemKV, v + page[it] * v_page + row_from_r0 * v_row, valid);
    }
  }
};

// Where this thread's copies of one K/V tile come from: per copy, the page and the row in it.
// Two steps, an iteration apart: fetch() issues the block-table reads of a tile (raw entries in
// registers, nothing computed from them) and resolve(), when the tile is issued one main-loop
// iteration later, clamps the entries and hands them out (by shuffles for small pages). A use
// of a loaded entry in fetch() itself (the clamp, a shuffle) would stall every warp for a table
// read each tile, an L2 round trip even with the table lines prefetched: measured at 4% (page
// size 64, pages in order) to 11% (16) of the contiguous cache's time (H200, 2026-12-02,
// kv_paged_ordered rows).
template <class T>
struct TileRows {
  enum class Lookup { none, one_page, shared_pages, per_row };
  int page[T::kCopyIters];  // per_row: raw entries until resolve(); shared_pages: page of the tile
  int row[T::kCopyIters];
  int entry_lo = 0, entry_hi = 0;  // none: the page (b); one_page: the entry; shared_pages: pages lane, lane + 32
  int first_row = 0;               // none, one_page: the tile's first row in its page
  Lookup lookup = Lookup::none;

  // Copy `it` of this thread: (tile row, 16-byte chunk).
  __device__ __forceinline__ static int tile_row(int it, int tid) { return (it * T::kThreads + tid) / T::kChunks; }
  __device__ __forceinline__ static int chunk(int it, int tid) { return (it * T::kThreads + tid) % T::kChunks; }

  // Reads the block-table entries of tile n (keys n * kBlockN ...) of sequence b with `len` keys.
  __device__ __forceinline__ void fetch(const KVCacheParams& p, int b, int n, int len, bool whole_page_tiles, int tid) {
    const int k0 = n * T::kBlockN;
    if (p.block_table == nullptr) {  // the contiguous cache: page b
      lookup = Lookup::none;
      entry_lo = b;
      first_row = k0;
      // The cp.async path issues such tiles from PageRowCopies where it can; TMA (thread 0's box
      // loads) and the other tile shapes read the rows here.
      if constexpr (T::kTma || !PageRowCopies<T>::kApplies) {
#pragma unroll
        for (int it = 0; it < T::kCopyIters; ++it) {
          page[it] = b;
          row[it] = k0 + tile_row(it, tid);
        }
      }
    } else if (whole_page_tiles) {  // the tile lies inside one page: one read, a broadcast
      lookup = Lookup::one_page;
      const int index = kv_page_index(p, k0);
      entry_lo = kv_page_entry(p, b, index);
      first_row = k0 - index * p.page_size;
      if constexpr (T::kTma || !PageRowCopies<T>::kApplies) {
#pragma unroll
        for (int it = 0; it < T::kCopyIters; ++it) row[it] = first_row + tile_row(it, tid);
      }
    } else if (kv_pages_shared_by_shuffles(T::kBlockN, p.page_size)) {
      // Whole small pages per tile (page size 1..32 at 64-key tiles): the tile starts on a page
      // boundary and holds up to 64 pages; lane i of each warp reads the table entries of pages
      // i and i + 32 once (coalesced) and resolve() hands them to the copies by shuffles,
      // instead of every copy reading its own (8 table reads per thread per tile at d 128).
      lookup = Lookup::shared_pages;
      // page_size divides kBlockN, a power of two: shifts (kv_page_index), 11 per tile per thread.
      const int shift = p.page_shift;
      const int pages = T::kBlockN >> shift;
      const int first = k0 >> shift;
      const int used = (len + p.page_size - 1) >> shift;  // pages holding keys: never past them
      const int lane = tid % 32;
      entry_lo = lane < pages && first + lane < used ? kv_page_entry(p, b, first + lane) : 0;
      entry_hi = lane + 32 < pages && first + lane + 32 < used ? kv_page_entry(p, b, first + lane + 32) : 0;
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) {
        const int r = tile_row(it, tid);
        const int j = r >> shift;  // page of the tile, < 64; rows past len are not read
        page[it] = j;
        if constexpr (!PageRowCopies<T>::kApplies) row[it] = r & (p.page_size - 1);  // else issue_pages' arithmetic
      }
    } else {
      lookup = Lookup::per_row;
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) {
        const int t = k0 + tile_row(it, tid);
        const int index = t < len ? kv_page_index(p, t) : 0;  // past the end: not read
        page[it] = t < len ? kv_page_entry(p, b, index) : 0;
        row[it] = t - index * p.page_size;
      }
    }
    if (p.block_table != nullptr) prefetch_table(p, b, n + kTablePrefetchTiles, len, tid);
  }

  // The pages of the fetched tile, clamped (kv_clamp_page). Every thread of the CTA calls it (the
  // shuffles need whole warps); `lookup` is the same on all of them.
  __device__ __forceinline__ void resolve(const KVCacheParams& p) {
    const auto clamp_page = [&](int entry) { return kv_clamp_page(p, entry); };
    if (lookup == Lookup::one_page) {
      const int first = clamp_page(entry_lo);
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) page[it] = first;
    } else if (lookup == Lookup::shared_pages) {
      const int lo = clamp_page(entry_lo), hi = clamp_page(entry_hi);
      const bool two_rounds = (T::kBlockN >> p.page_shift) > 32;
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) {
        const int j = page[it];
        const int from_lo = __shfl_sync(0xffffffffu, lo, j % 32);
        const int from_hi = two_rounds ? __shfl_sync(0xffffffffu, hi, j % 32) : 0;
        page[it] = j < 32 ? from_lo : from_hi;
      }
    } else if (lookup == Lookup::per_row) {
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) page[it] = clamp_page(page[it]);
    }
  }

  // Prefetches the 128-byte lines of the block-table entries of tile m (if it holds keys), one
  // line per thread; every address is an entry of the tile, so nothing outside the table.
  __device__ __forceinline__ static void prefetch_table(const KVCacheParams& p, int b, int m, int len, int tid) {
    const int k0 = m * T::kBlockN;
    if (k0 >= len) return;
    const std::int32_t* entries = p.block_table + static_cast<int64_t>(b) * p.block_table_stride;
    const int last_key = min(k0 + T::kBlockN, len) - 1;
    const std::int32_t* first = entries + kv_page_index(p, k0);
    const std::int32_t* last = entries + kv_page_index(p, last_key);
    const uintptr_t line = (reinterpret_cast<uintptr_t>(first) & ~uintptr_t{127}) + static_cast<uintptr_t>(tid) * 128;
    const std::int32_t* at = tid == 0 ? first : reinterpret_cast<const std::int32_t*>(line);
    if (at <= last) prefetch_l2(at);
  }
};

// cp.async of the Q rows [r0, r0 + kBlockM) of (batch, kv_head) into sQ: (kBlockM, kSmemRowElems)
// 16-bit, swizzled; packed row r = token * group + head; rows past p.rows zero-filled.
template <class T>
__device__ __forceinline__ void issue_q_rows(const KVCacheParams& p, uint32_t sQ, int batch, int kv_head, int r0,
                                             int tid) {
  using E = typename T::Element;
  const E* q_base = static_cast<const E*>(p.q) + batch * p.q_batch_stride;
#pragma unroll
  for (int idx = tid; idx < T::kBlockM * T::kChunks; idx += T::kThreads) {
    const int r = idx / T::kChunks, c = idx % T::kChunks;
    const int row = r0 + r;
    const bool valid = row < p.rows;
    const int token = row / p.group, head = kv_head * p.group + row % p.group;
    const E* src = q_base + token * p.q_token_stride + head * p.q_head_stride + c * 8;
    sm80::cp_async_16(sQ + T::Layout::offset(r, c), valid ? src : static_cast<const E*>(p.q), valid);
  }
}

// cp.async of K and V tile n into one stage (its pages resolved first); rows at or past `len` are
// zero-filled. Kept branch-free: at one CTA per SM (b1 splits, b16 GQA) the kernel streams only
// as fast as its four warps issue, and a uniform runtime branch per copy here (a switch between
// cp.async variants) made those calls 20-25% slower (H200, 2026-12-02,
// docs/inference-cuda-decode.md). The variants themselves: .L2::128B no change, .L2::256B 8-12% slower at two
// CTAs per SM and on paged caches.
template <class T>
__device__ __forceinline__ void issue_kv_tile(const KVCacheParams& p, TileRows<T>& rows, uint32_t sK,
                                              const PageRowCopies<T>& in_page,
                                              const typename T::Element* k_head, const typename T::Element* v_head,
                                              int n, int len, int tid) {
  using E = typename T::Element;
  const int k0 = n * T::kBlockN;
  if constexpr (PageRowCopies<T>::kApplies) {
    // A tile in one page (CTA-uniform, decided once per tile; a branch per copy here cost 20-25%,
    // see above): the contiguous cache's page b from key k0, or the entry's page from first_row.
    if (rows.lookup == TileRows<T>::Lookup::none) {
      in_page.issue(sK, rows.entry_lo, rows.first_row, len - k0);
      return;
    }
    if (rows.lookup == TileRows<T>::Lookup::one_page) {
      in_page.issue(sK, kv_clamp_page(p, rows.entry_lo), rows.first_row, len - k0);
      return;
    }
    if (rows.lookup == TileRows<T>::Lookup::shared_pages) {
      rows.resolve(p);  // page[it]: the clamped entries, handed out by shuffles
      in_page.issue_pages(sK, rows.page, p.page_size - 1, len - k0);
      return;
    }
  }
  rows.resolve(p);
#pragma unroll
  for (int it = 0; it < T::kCopyIters; ++it) {
    const int r = TileRows<T>::tile_row(it, tid), c = TileRows<T>::chunk(it, tid);
    const bool valid = k0 + r < len;
    const uint32_t dst = sK + T::Layout::offset(r, c);
    const E* k_src = k_head + rows.page[it] * p.k_page_stride + static_cast<int64_t>(rows.row[it]) * p.k_token_stride + c * 8;
    const E* v_src = v_head + rows.page[it] * p.v_page_stride + static_cast<int64_t>(rows.row[it]) * p.v_token_stride + c * 8;
    sm80::cp_async_16(dst, valid ? k_src : static_cast<const E*>(p.k), valid);
    sm80::cp_async_16(dst + T::kSmemKV, valid ? v_src : static_cast<const E*>(p.v), valid);
  }
}

// TMA (KVLoad::tma): K and V tile n into one stage by thread 0's box loads, counted on the
// stage's barrier `bar`; every thread resolves the tile's page (TileRows: the contiguous cache
// or one page per tile), thread 0's first row is the tile's first row in that page.
template <class T>
__device__ __forceinline__ void issue_kv_tile_tma(const KVCacheParams& p, TileRows<T>& rows, uint32_t sK, uint32_t bar,
                                                  const KVTensorMaps& maps, int kv_head, int tid) {
  rows.resolve(p);
  if (tid == 0) {
    kv_tma::load_tile<T::kPanels>(bar, sK, sK + T::kSmemKV, T::kPanelBytes, 2 * T::kSmemKV, maps, rows.row[0], kv_head,
                                  rows.page[0]);
  }
}

// TMA loads every row of a tile that its page holds, also past the sequence's length: V rows
// [first, kBlockN) of the landed tile are zeroed (P is 0 there, but 0 x a NaN in stale cache
// memory is NaN; K needs nothing: those scores are masked to -inf by assignment). sV: (kPanels x
// kBlockN, 64) 16-bit panels, 128-byte swizzle. All threads; a CTA barrier follows.
template <class T>
__device__ __forceinline__ void zero_tail_rows_tma(uint32_t sV, int first, int tid) {
  const int count = (T::kBlockN - first) * T::kChunks;
  for (int idx = tid; idx < count; idx += T::kThreads) {
    const int r = first + idx / T::kChunks, c = idx % T::kChunks;
    const uint32_t at = sV + T::Panels::offset(r, c);
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0u) : "memory");
  }
  kv_tma::fence_shared_for_async_proxy();  // before the stage's next TMA write
}

}  // namespace fastattn::cuda
