// kv_cache_kernel.cuh — attention over a KV cache (contiguous or paged), for decode (seqlen_q
// 1..16), speculative decoding and chunked prefill: one 4-warp CTA per (batch, KV head, row
// block, key split).
//
// Rows: the query heads of one KV head times the query tokens, row r = token * group + head
// (GQA packing), so a CTA reads each K/V byte of its key range once for all of them. The row
// tile (kv_cache_heuristics.hpp: 16, 32, 64 or 128 rows) puts 4 warps on it as row warps x key
// warps: a key warp takes its own kWarpKeys keys of every K/V tile, keeps its own online
// softmax, and the key warps' partial results are merged exactly (by their lse) in the
// epilogue.
//
// Loads: a ring of kStages (K, V) tiles of kBlockN keys, filled one of two ways
// (kv_cache_heuristics.hpp: KVLoad). cp.async: every thread's 16-byte gathers, a commit group
// per tile, rows at or past the cache length zero-filled, never read. TMA (sm90, a tile inside
// one page): thread 0 issues box loads of whole 64-column panels (kv_cache_tma.cuh), counted on
// the stage's mbarrier; rows past the length that the page holds are loaded and then zeroed in
// V. Key t of sequence b is row t % page_size of page block_table[b][t / page_size] (contiguous:
// page b), so any page size works; when page_size is a multiple of kBlockN a tile lies in one
// page and takes one block-table read, else each row looks its page up. The table entries of the
// tile after next are read one iteration ahead into registers and used (clamped, shuffled) only
// when that tile is issued, so the block-table read is off the critical path; small pages that
// divide the tile (1 to 32 at 64-key tiles, 2 to 64 at 128) are read once per page and shared
// by warp shuffles.
//
// Masks: causal / window positions are aligned to each sequence's cache length (bottom-right:
// query token t sits at key position len - seqlen_q + t); a tile that every row sees whole skips
// the mask arithmetic. A row that sees no key writes out 0 and lse -inf.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/mask.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/inference/kv_cache_combine.cuh"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/inference/kv_cache_pages.cuh"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/inference/kv_cache_tma.cuh"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/forward_arch.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Tile shapes of one (element, head_dim, row tile); the members tile_ops.cuh's gemm_qk /
// gemm_pv read are those of ForwardTraits (traits.cuh), for one warp's rows and keys.
template <typename Element_, int kHeadDim_, int kRows_, int kStages_ = kv_stages(kHeadDim_),
          KVLoad kLoad_ = KVLoad::cp_async>
struct KVCacheTraits {
  using Element = Element_;
  using Arch = Sm80Forward;
  static constexpr KVRowTile kTile = kv_row_tile(kRows_, kHeadDim_);
  static_assert(kTile.rows == kRows_, "a row tile of kv_cache_heuristics.hpp");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kThreads = kKVThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRowWarps = kTile.row_warps;
  static constexpr int kKeyWarps = kTile.key_warps;
  static_assert(kRowWarps * kKeyWarps == kWarps, "every warp has rows and keys");
  static constexpr int kMTiles = kTile.m_tiles;  // 16-row MMA tiles per warp
  static constexpr int kWarpRows = kMTiles * 16;
  static constexpr int kBlockM = kTile.rows;
  static_assert(kBlockM == kRowWarps * kWarpRows, "row warps cover the tile");
  static constexpr int kBlockN = kv_block_n(kHeadDim);
  static constexpr int kStages = kStages_;
  static_assert(kv_stages_valid(kTile, kHeadDim_, kStages_), "a ring of kv_cache_heuristics.hpp");
  static constexpr int kWarpKeys = kBlockN / kKeyWarps;  // keys of a tile per key warp
  static_assert(kWarpKeys % 16 == 0, "whole k16 steps of P V per warp");
  static constexpr int kNTilesS = kWarpKeys / 8;
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kNTilesO = kHeadDim / 8;
  static constexpr int kKStepsPV = kWarpKeys / 16;
  using Layout = typename Arch::template SmemLayout<kHeadDim>;
  static constexpr int kSmemRowElems = Layout::kRowElems;
  static constexpr int kRowBytes = kSmemRowElems * 2;
  static_assert(kRowBytes == kv_row_bytes(kHeadDim), "the plan sizes shared memory from kv_row_bytes");
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemKV = kBlockN * kRowBytes;
  static constexpr int kSmemStage = 2 * kSmemKV;  // K then V
  static constexpr int kOStride = kHeadDim + 8;   // f32 row stride of the epilogue partials
  // K/V loads (kv_cache_heuristics.hpp: KVLoad). TMA writes a tile as kPanels 64-column panels
  // of kBlockN 128-byte rows (fragment_address.cuh: PanelFragmentAddress); cp.async writes
  // SwizzledTile rows of kRowBytes. Either way a tile takes kSmemKV bytes.
  static constexpr bool kTma = kLoad_ == KVLoad::tma;
  using Panels = PanelTile<kBlockN>;  // a K or V tile as TMA writes it
  static constexpr int kPanels = kRowBytes / 128;
  static constexpr int kPanelBytes = Panels::kPanelBytes;
  static_assert(kPanels * kPanelBytes == kSmemKV, "panels cover the tile");
  static constexpr int kKeyRowBytes = kTma ? 128 : kRowBytes;  // from one key row to the next
  static_assert(kSmemQ % 1024 == 0, "the ring starts on TMA's 1024-byte swizzle period");
  static constexpr int kSmemBarriers = kSmemQ + kv_ring_or_epilogue_bytes(kTile, kHeadDim, kStages);  // TMA: stage mbarriers
  static constexpr int kSmemBytes = kv_smem_bytes(kTile, kHeadDim, kStages, kLoad_);
  static_assert(!kTma || kSmemBytes >= kSmemBarriers + 8 * kStages + 1024, "the barriers and the alignment fit");
  static_assert(kSmemBytes >= kSmemQ + kStages * kSmemStage, "the ring fits");
  using FragQ = FragmentAddress<kSmemRowElems, LanePattern::kA>;  // Q: cp.async, SwizzledTile rows
  using FragK = std::conditional_t<kTma, PanelFragmentAddress<kBlockN, LanePattern::kB>,
                                   FragmentAddress<kSmemRowElems, LanePattern::kB>>;
  using FragV = std::conditional_t<kTma, PanelFragmentAddress<kBlockN, LanePattern::kBTrans>,
                                   FragmentAddress<kSmemRowElems, LanePattern::kBTrans>>;
  static_assert(kSmemBytes >= kSmemQ + kKeyWarps * kBlockM * (kOStride + 1) * 4, "the epilogue fits");
  static_assert(kSmemBytes >= kSmemQ + kWarps * kKVMaxSplits * 4, "the fused combine's weights fit");
  static constexpr int kCopyIters = kBlockN * kChunks / kThreads;  // 16-byte copies per thread per tensor
  static_assert(kBlockN * kChunks % kThreads == 0, "whole copy passes");
  static constexpr int kMinCtasPerSm = kv_launch_ctas_per_sm(kTile, kStages);
};

// Block-table lines are prefetched into L2 this many tiles before their pages are read: a
// table read that misses L2 under full memory load takes about as long as a tile, and the
// cp.async of the tile after next waits for it (measured before the prefetch, H200 2026-12-01,
// GQA 32/8 b16 kv 32k: page size 1 at 0.48x, 16 at 0.82x of the contiguous cache; 64 and 256,
// one table read per tile, at 1.0x).
constexpr int kTablePrefetchTiles = 4;

__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

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
  int entry_lo = 0, entry_hi = 0;  // one_page: the entry; shared_pages: pages lane, lane + 32
  Lookup lookup = Lookup::none;

  // Copy `it` of this thread: (tile row, 16-byte chunk).
  __device__ __forceinline__ static int tile_row(int it, int tid) { return (it * T::kThreads + tid) / T::kChunks; }
  __device__ __forceinline__ static int chunk(int it, int tid) { return (it * T::kThreads + tid) % T::kChunks; }

  // Reads the block-table entries of tile n (keys n * kBlockN ...) of sequence b with `len` keys.
  __device__ __forceinline__ void fetch(const KVCacheParams& p, int b, int n, int len, bool whole_page_tiles, int tid) {
    const int k0 = n * T::kBlockN;
    if (p.block_table == nullptr) {
      lookup = Lookup::none;
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) {
        page[it] = b;
        row[it] = k0 + tile_row(it, tid);
      }
    } else if (whole_page_tiles) {  // the tile lies inside one page: one read, a broadcast
      lookup = Lookup::one_page;
      const int index = kv_page_index(p, k0);
      entry_lo = kv_page_entry(p, b, index);
      const int in_page = k0 - index * p.page_size;
#pragma unroll
      for (int it = 0; it < T::kCopyIters; ++it) row[it] = in_page + tile_row(it, tid);
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
        row[it] = r & (p.page_size - 1);
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

// cp.async of K and V tile n into one stage (its pages resolved first); rows at or past `len` are
// zero-filled. Kept branch-free: at one CTA per SM (b1 splits, b16 GQA) the kernel streams only
// as fast as its four warps issue, and a uniform runtime branch per copy here (a switch between
// cp.async variants) made those calls 20-25% slower (H200, 2026-12-02, docs/inference.md "CUDA
// decode kernel"). The variants themselves: .L2::128B no change, .L2::256B 8-12% slower at two
// CTAs per SM and on paged caches.
template <class T>
__device__ __forceinline__ void issue_kv_tile(const KVCacheParams& p, TileRows<T>& rows, uint32_t sK,
                                              const typename T::Element* k_head, const typename T::Element* v_head,
                                              int n, int len, int tid) {
  using E = typename T::Element;
  const int k0 = n * T::kBlockN;
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

template <class T, bool kSoftcap>
__global__ void __launch_bounds__(T::kThreads, T::kMinCtasPerSm)
    kv_cache_attention_kernel(const KVCacheParams p, const __grid_constant__ KVTensorMaps maps) {
  using E = typename T::Element;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // TMA's 128-byte swizzle repeats every 1024 bytes: its panels start on such a boundary
  // (kv_tma_extra_bytes pays for the shift).
  unsigned char* smem = smem_raw;
  if constexpr (T::kTma) smem += (1024u - (sm80::smem_address(smem_raw) & 1023u)) & 1023u;
  const uint32_t sQ = sm80::smem_address(smem);
  const uint32_t sRing = sQ + T::kSmemQ;
  const uint32_t sBarriers = sQ + T::kSmemBarriers;  // TMA: one mbarrier per stage

  // Launched as a programmatic dependent (KVCacheLaunch::pdl), the CTA may start while the
  // kernel before it on the stream finishes: it waits here for that grid's completion and memory
  // before any global read or write (seqlens, block table, Q, K/V, partials, counters), then lets
  // the next dependent launch (which in turn waits for this grid to complete). Without a
  // programmatic launch both return at once. PTX ISA: griddepcontrol (sm_90).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif

  // ---- tile scheduler: blockIdx.x = row block * num_splits + split ----------------------------
  const int split = static_cast<int>(blockIdx.x) % p.num_splits;
  const int row_block = static_cast<int>(blockIdx.x) / p.num_splits;
  const int kv_head = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int row_warp = warp % T::kRowWarps, key_warp = warp / T::kRowWarps;
  const int warp_row0 = row_warp * T::kWarpRows;  // within the CTA's rows
  const int r0 = row_block * T::kBlockM;          // first packed row of the CTA
  const int r1 = min(r0 + T::kBlockM, p.rows);

  const int len = kv_cache_length(p, batch);
  SequenceMask mask;
  mask.left = p.window_left;
  mask.right = p.window_right;
  mask.offset = p.bottom_right ? static_cast<int64_t>(len) - p.seqlen_q : 0;
  mask.seqlen_k = len;
  // Tokens of the CTA's rows, and the keys any of them sees.
  const int t_first = r0 / p.group, t_last = (r1 - 1) / p.group;
  const int64_t key_begin = mask.key_begin(t_first), key_end = mask.key_end(t_last + 1);
  int n_begin = static_cast<int>(key_begin / T::kBlockN);
  int n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;
  {
    const int per_split = (n_end - n_begin + p.num_splits - 1) / p.num_splits;
    const int lo = min(n_end, n_begin + split * per_split);
    n_end = min(n_end, lo + per_split);
    n_begin = lo;
  }
  const int n_tiles = n_end - n_begin;

  // Visible keys [lo, hi] of this thread's rows (two per 16-row MMA tile: lane / 4 and + 8).
  int key_lo[2 * T::kMTiles], key_hi[2 * T::kMTiles];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = min(r0 + warp_row0 + mt * 16 + lane / 4 + half * 8, p.rows - 1);  // padding rows: any token
      const int64_t d = r / p.group + mask.offset;
      key_lo[2 * mt + half] = p.window_left >= 0 ? static_cast<int>(max(int64_t{0}, d - p.window_left)) : 0;
      key_hi[2 * mt + half] =
          p.window_right >= 0 ? static_cast<int>(min(static_cast<int64_t>(len) - 1, d + p.window_right)) : len - 1;
    }

  const E* k_head = static_cast<const E*>(p.k) + kv_head * p.k_head_stride;
  const E* v_head = static_cast<const E*>(p.v) + kv_head * p.v_head_stride;
  const bool whole_page_tiles = p.page_size % T::kBlockN == 0;

  float acc_o[T::kMTiles][T::kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nt][e] = 0.0f;
  OnlineSoftmax<2 * T::kMTiles, T::kNTilesS> softmax;
  softmax.init();

  if constexpr (T::kTma) {
    if (tid == 0) kv_tma::init_barriers(sBarriers, T::kStages, maps);
    __syncthreads();
  }

  // ---- prologue: Q with tile 0, then tiles 1 .. kStages - 2, one commit group per tile --------
  // cp.async: groups are committed even when empty, so "tile i landed" is always "all but the
  // newest kStages - 2 groups done" at the top of iteration i. TMA: tile i landed when the
  // barrier of its stage completes phase i / kStages (parity (i / kStages) & 1).
  TileRows<T> next;  // pages of the next tile to issue
  if (n_tiles > 0) {
    // sQ: (kBlockM, kSmemRowElems) 16-bit, swizzled; packed row r = token * group + head.
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
    next.fetch(p, batch, n_begin, len, whole_page_tiles, tid);
  }
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < n_tiles) {
      if constexpr (T::kTma) {
        issue_kv_tile_tma<T>(p, next, sRing + s * T::kSmemStage, sBarriers + 8 * s, maps, kv_head, tid);
      } else {
        issue_kv_tile<T>(p, next, sRing + s * T::kSmemStage, k_head, v_head, n_begin + s, len, tid);
      }
      if (s + 1 < n_tiles) next.fetch(p, batch, n_begin + s + 1, len, whole_page_tiles, tid);
    }
    if constexpr (!T::kTma) sm80::cp_async_commit();
  }
  if constexpr (T::kTma) {  // Q is the launch's only cp.async group
    sm80::cp_async_commit();
    sm80::cp_async_wait<0>();
  }

  // ---- main loop ------------------------------------------------------------------------------
  const float exp_scale = fabsf(p.scale_log2);
  for (int i = 0; i < n_tiles; ++i) {
    const int k0 = (n_begin + i) * T::kBlockN;
    if constexpr (T::kTma) {
      kv_tma::wait(sBarriers + 8 * (i % T::kStages), static_cast<uint32_t>((i / T::kStages) & 1));
      if (k0 + T::kBlockN > len) {  // CTA-uniform
        zero_tail_rows_tma<T>(sRing + (i % T::kStages) * T::kSmemStage + T::kSmemKV, max(len - k0, 0), tid);
      }
    } else {
      sm80::cp_async_wait<T::kStages - 2>();
    }
    // Tile i (and Q) landed for every thread, and every warp is done with tile i - 1, whose
    // stage the load below refills.
    __syncthreads();
    const int load = i + T::kStages - 1;
    if (load < n_tiles) {
      const uint32_t stage = sRing + (load % T::kStages) * T::kSmemStage;
      if constexpr (T::kTma) {
        issue_kv_tile_tma<T>(p, next, stage, sBarriers + 8 * (load % T::kStages), maps, kv_head, tid);
      } else {
        issue_kv_tile<T>(p, next, stage, k_head, v_head, n_begin + load, len, tid);
      }
      if (load + 1 < n_tiles) next.fetch(p, batch, n_begin + load + 1, len, whole_page_tiles, tid);
    }
    if constexpr (!T::kTma) sm80::cp_async_commit();

    // sK: this key warp's kWarpKeys rows of the tile (V at + kSmemKV, the same rows).
    const uint32_t sK = sRing + (i % T::kStages) * T::kSmemStage + key_warp * T::kWarpKeys * T::kKeyRowBytes;
    float acc_s[T::kMTiles][T::kNTilesS][4];
    gemm_qk<T, typename T::FragQ, typename T::FragK>(acc_s, sQ, sK, warp_row0, lane);
    if constexpr (kSoftcap) {
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = p.softcap * tanhf(acc_s[mt][nt][e] * p.softcap_pre_scale);
    } else if (p.scale_log2 < 0.0f) {  // the softmax takes |scale|: negate the scores instead
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = -acc_s[mt][nt][e];
    }
    if (mask.classify(t_first, t_last + 1, k0, k0 + T::kBlockN) != TileClass::full) {
      const int j0 = k0 + key_warp * T::kWarpKeys + 2 * (lane % 4);
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
          for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = j0 + nt * 8 + e;
              if (j < key_lo[2 * mt + half] || j > key_hi[2 * mt + half]) acc_s[mt][nt][2 * half + e] = -INFINITY;
            }
    }
    float rescale[2 * T::kMTiles];
    softmax.update(acc_s, rescale, exp_scale);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        acc_o[mt][nt][0] *= rescale[2 * mt];
        acc_o[mt][nt][1] *= rescale[2 * mt];
        acc_o[mt][nt][2] *= rescale[2 * mt + 1];
        acc_o[mt][nt][3] *= rescale[2 * mt + 1];
      }
    gemm_pv<T, typename T::FragV>(acc_o, acc_s, sK + T::kSmemKV, lane);
  }
  sm80::cp_async_wait<0>();  // only empty groups remain; leave none behind
  __syncthreads();           // every warp is done with the ring: the epilogue reuses it

  // ---- epilogue 1: each warp's rows, normalised by its own sum, and their lse to shared ------
  // sO: (kKeyWarps, kBlockM, kOStride) f32; sL: (kKeyWarps, kBlockM) f32 (natural log; -inf:
  // the key warp saw no key of the row).
  float* sO = reinterpret_cast<float*>(smem + T::kSmemQ);
  float* sL = sO + T::kKeyWarps * T::kBlockM * T::kOStride;
  {
    float inv_sum[2 * T::kMTiles], lse[2 * T::kMTiles];
    softmax.finalize(inv_sum, lse);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = warp_row0 + mt * 16 + lane / 4 + half * 8;
        const float inv = inv_sum[2 * mt + half];
        float* o_row = sO + (key_warp * T::kBlockM + r) * T::kOStride + 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < T::kNTilesO; ++nt) {
          *reinterpret_cast<float2*>(o_row + nt * 8) =
              make_float2(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
        }
        if (lane % 4 == 0) sL[key_warp * T::kBlockM + r] = lse[2 * mt + half];
      }
  }
  __syncthreads();

  // ---- epilogue 2: merge the key warps (lse-weighted), store 4 columns per thread -------------
  // Out (no split) or this split's f32 partial (kv_cache_combine.cuh merges the splits).
  constexpr int kQuads = T::kHeadDim / 4;
  for (int idx = tid; idx < T::kBlockM * kQuads; idx += T::kThreads) {
    const int r = idx / kQuads, c = idx % kQuads;
    const int row = r0 + r;
    if (row >= p.rows) continue;
    float max_lse = -INFINITY;
#pragma unroll
    for (int w = 0; w < T::kKeyWarps; ++w) max_lse = fmaxf(max_lse, sL[w * T::kBlockM + r]);
    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float row_lse = -INFINITY;
    if (max_lse != -INFINITY) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < T::kKeyWarps; ++w) sum += expf(sL[w * T::kBlockM + r] - max_lse);
      row_lse = max_lse + logf(sum);
#pragma unroll
      for (int w = 0; w < T::kKeyWarps; ++w) {
        const float weight = expf(sL[w * T::kBlockM + r] - row_lse);
        const float4 x = *reinterpret_cast<const float4*>(sO + (w * T::kBlockM + r) * T::kOStride + c * 4);
        o.x += weight * x.x;
        o.y += weight * x.y;
        o.z += weight * x.z;
        o.w += weight * x.w;
      }
    }
    const int token = row / p.group, head = kv_head * p.group + row % p.group;
    if (p.num_splits == 1) {
      const int64_t at = batch * p.o_batch_stride + token * p.o_token_stride + head * p.o_head_stride + c * 4;
      if (p.out_f32) {
        *reinterpret_cast<float4*>(static_cast<float*>(p.out) + at) = o;
      } else {
        *reinterpret_cast<uint2*>(static_cast<E*>(p.out) + at) = make_uint2(sm80::pack2<E>(o.x, o.y), sm80::pack2<E>(o.z, o.w));
      }
      if (p.lse != nullptr && c == 0) {
        p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token * p.lse_token_stride] = row_lse;
      }
    } else {
      const int64_t part = ((static_cast<int64_t>(split) * p.batch + batch) * p.num_kv_heads + kv_head) * p.rows + row;
      *reinterpret_cast<float4*>(p.oaccum + part * T::kHeadDim + c * 4) = o;
      if (c == 0) p.lseaccum[part] = row_lse;
    }
  }

  // ---- fused combine: the last split of this (batch, KV head, row block) merges them all -----
  // (kv_cache_heuristics.hpp: KVCombine::fused). The classic fence-then-count pattern: every
  // thread's partial stores are made visible device-wide, then one arrival per CTA is counted;
  // the CTA that counts last reads every split's partials (in split order: the result does not
  // depend on which CTA is last) and zeroes the counter for the next launch.
  if (p.num_splits > 1 && p.split_counters != nullptr) {
    __threadfence();
    __syncthreads();
    int* last_flag = reinterpret_cast<int*>(smem);  // the Q tile's space: free after the main loop
    if (tid == 0) {
      int* counter =
          p.split_counters + (static_cast<int64_t>(batch) * p.num_kv_heads + kv_head) * p.row_blocks + row_block;
      const int last = atomicAdd(counter, 1) == p.num_splits - 1;
      if (last) *counter = 0;  // every split has arrived
      *last_flag = last;
    }
    __syncthreads();
    if (*last_flag == 0) return;  // CTA-uniform
    __threadfence();  // order the reads below after the other splits' arrivals
    // weight: kKVMaxSplits floats per warp, in the epilogue's space (its reads are done).
    float* weight = reinterpret_cast<float*>(smem + T::kSmemQ) + warp * kKVMaxSplits;
    for (int row = r0 + warp; row < r1; row += T::kWarps) {
      kv_combine_row<E, T::kHeadDim>(p, batch, kv_head, row, weight, lane);
    }
  }
}

}  // namespace fastattn::cuda
