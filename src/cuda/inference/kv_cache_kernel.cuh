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

#include "cuda/inference/kv_cache_combine.cuh"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/inference/kv_cache_loads.cuh"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/inference/kv_cache_tile.cuh"
#include "cuda/inference/kv_cache_traits.cuh"
#include "cuda/inference/kv_cache_tma.cuh"
#include "cuda/sm80/copy.cuh"

namespace fastattn::cuda {

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

  // The keys the CTA's rows see, and this split's share of their tiles.
  UnitRows<T> unit;
  unit.init(p, batch, r0, r1, warp_row0, lane);
  const int len = unit.len;
  int n_begin = unit.n_begin, n_end = unit.n_end;
  {
    const int per_split = (n_end - n_begin + p.num_splits - 1) / p.num_splits;
    const int lo = min(n_end, n_begin + split * per_split);
    n_end = min(n_end, lo + per_split);
    n_begin = lo;
  }
  const int n_tiles = n_end - n_begin;

  const E* k_head = static_cast<const E*>(p.k) + kv_head * p.k_head_stride;
  const E* v_head = static_cast<const E*>(p.v) + kv_head * p.v_head_stride;
  const bool whole_page_tiles = p.page_size % T::kBlockN == 0;
  PageRowCopies<T> in_page;  // tiles that lie in one page (kv_cache_loads.cuh)
  in_page.set(p, kv_head, tid);

  float acc_o[T::kMTiles][T::kNTilesO][4];
  clear_output<T>(acc_o);
  KVSoftmax<T> softmax;
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
    issue_q_rows<T>(p, sQ, batch, kv_head, r0, tid);
    next.fetch(p, batch, n_begin, len, whole_page_tiles, tid);
  }
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < n_tiles) {
      if constexpr (T::kTma) {
        issue_kv_tile_tma<T>(p, next, sRing + s * T::kSmemStage, sBarriers + 8 * s, maps, kv_head, tid);
      } else {
        issue_kv_tile<T>(p, next, sRing + s * T::kSmemStage, in_page, k_head, v_head, n_begin + s, len, tid);
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
        issue_kv_tile<T>(p, next, stage, in_page, k_head, v_head, n_begin + load, len, tid);
      }
      if (load + 1 < n_tiles) next.fetch(p, batch, n_begin + load + 1, len, whole_page_tiles, tid);
    }
    if constexpr (!T::kTma) sm80::cp_async_commit();

    // sK: this key warp's kWarpKeys rows of the tile (V at + kSmemKV, the same rows).
    const uint32_t sK = sRing + (i % T::kStages) * T::kSmemStage + key_warp * T::kWarpKeys * T::kKeyRowBytes;
    attend_kv_tile<T, kSoftcap>(p, unit, k0, sQ, sK, warp_row0, key_warp, lane, acc_o, softmax, exp_scale);
  }
  sm80::cp_async_wait<0>();  // only empty groups remain; leave none behind
  __syncthreads();           // every warp is done with the ring: the epilogue reuses it

  // ---- epilogue 1: each warp's rows, normalised by its own sum, and their lse to shared ------
  // sO: (kKeyWarps, kBlockM, kOStride) f32; sL: (kKeyWarps, kBlockM) f32 (natural log; -inf:
  // the key warp saw no key of the row).
  float* sO = reinterpret_cast<float*>(smem + T::kSmemQ);
  float* sL = sO + T::kKeyWarps * T::kBlockM * T::kOStride;
  key_warp_rows_to_shared<T>(softmax, acc_o, sO, T::kOStride, sL, warp_row0, key_warp, lane);
  __syncthreads();

  // ---- epilogue 2: merge the key warps (lse-weighted), store 4 columns per thread -------------
  // Out (no split) or this split's f32 partial (kv_cache_combine.cuh merges the splits).
  constexpr int kQuads = T::kHeadDim / 4;
  for (int idx = tid; idx < T::kBlockM * kQuads; idx += T::kThreads) {
    const int r = idx / kQuads, c = idx % kQuads;
    const int row = r0 + r;
    if (row >= p.rows) continue;
    float row_lse;
    const float4 o = merge_key_warps<T>(sO, T::kOStride, sL, r, c, row_lse);
    if (p.num_splits == 1) {
      store_out_quad<T>(p, batch, kv_head, row, c, o, row_lse);
    } else {
      const int64_t part = ((static_cast<int64_t>(split) * p.batch + batch) * p.num_kv_heads + kv_head) * p.rows + row;
      store_partial_quad<T>(p, part, c, o, row_lse);
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
