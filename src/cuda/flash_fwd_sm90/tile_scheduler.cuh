// tile_scheduler.cuh — which (query block, head, batch) tiles a CTA of the sm90 forward runs, and
// the key tiles each visits. Both roles (producer and consumers) walk the same tile sequence
// and derive the same Sm90TileWork, so they meet on the mbarriers in the same order.
//
// Varlen batches (work<true>) use the same numbering with the longest sequence's query-block
// count: the tiles past a shorter sequence's end are empty and cost a read of cu_seqlens.
// Tiles are numbered 0 .. num_tiles - 1 (num_tiles = query blocks * heads * batch); the
// schedule (plan.hpp: Sm90Scheduler) says which numbers a CTA takes and what a number means
// (tile_numbering.hpp decodes them, in 32 bits with divisors prepared at launch):
//   grid        grid (m_blocks, heads, batch), one tile per CTA: tile = the linear block index,
//               the query block reversed (the last, under a causal mask the longest, first);
//   persistent  grid min(num_tiles, SMs), CTA c takes tiles c, c + G, c + 2G, ...; a tile
//               number is (section, query block from the last, (head, batch) in the section),
//               sections of `section_hb` (head, batch) pairs (plan.hpp: Sm90Sections): those
//               whose K/V fit half the L2, or one (calls without a mask: a pair's query blocks
//               are consecutive numbers and run together), or about one wave's worth with the
//               ranks reversed in every other section (`alternate`, forced only). With the
//               stride, every CTA takes at most one tile more than another, and the short tiles
//               (first query blocks) come last in each section: longest first.
//   dynamic     persistent's grid and numbering (schedule() sets `persistent`); CTA c takes
//               tile c first, then the numbers a global counter hands out (kernel_dynamic.cuh),
//               so the tiles still start longest first per section, and whichever CTA is free
//               takes the next one (FA3's causal scheduler numbers and fetches its tiles so too).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/flash_fwd_sm90/tile_numbering.hpp"

namespace fastattn::cuda {

struct Sm90TileWork {
  int m_block, head, batch, kv_head;
  int q0, q1;        // query rows [q0, q1) of the sequence
  int len_q, len_k;
  int q_start, k_start;  // varlen: the sequence's first token in the packed q / k; padded: 0
  int n_begin, n_end;  // key tiles [n_begin, n_end), visited from n_end - 1 down
  SequenceMask32 mask;  // windows clamped by the launcher (launch.cuh: 32-bit positions)
  __host__ __device__ bool has_keys() const { return n_begin < n_end; }
};

// Where a role is in the CTA's pipeline, counted over every tile it ran so far (the barrier
// phases continue from tile to tile): `kv` key tiles through the (K, V) ring, `q` Q loads.
struct Sm90PipelineCount {
  int kv = 0, q = 0;
};

template <class T>
struct Sm90TileScheduler {
  static Sm90TileSchedule schedule(const ForwardParams& p, Sm90Scheduler kind, Sm90Sections sections, int l2_bytes,
                                   int multiprocessors) {
    Sm90TileSchedule s{};
    s.m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    s.num_heads = p.num_heads;
    s.total_hb = static_cast<int64_t>(p.num_heads) * p.batch;
    s.num_tiles = s.total_hb * s.m_blocks;
    s.persistent = kind != Sm90Scheduler::grid ? 1 : 0;
    // K and V of one (head, batch), shared by the group's query heads.
    const int64_t kv_bytes = std::max<int64_t>(int64_t{4} * p.seqlen_k * T::kHeadDim / std::max(p.group_size, 1), 1);
    const int64_t l2_half_hb = static_cast<int64_t>(l2_bytes / 2) / kv_bytes;
    const int64_t wave_hb = (std::max(multiprocessors, 1) + s.m_blocks - 1) / std::max(s.m_blocks, 1);
    s.section_hb = std::clamp<int64_t>(sections == Sm90Sections::per_pair ? 1
                                       : sections == Sm90Sections::wave   ? std::min(wave_hb, l2_half_hb)
                                                                          : l2_half_hb,
                                       1, std::max<int64_t>(s.total_hb, 1));
    // The dynamic kernel hands tiles out in order anyway.
    s.alternate = sections == Sm90Sections::wave && kind == Sm90Scheduler::persistent ? 1 : 0;
    s.group_size = std::max(p.group_size, 1);
    sm90_prepare_tile_divisors(s);
    return s;
  }

  static dim3 grid(const ForwardParams& p, const Sm90TileSchedule& s, int multiprocessors) {
    if (s.persistent) return dim3(static_cast<unsigned>(std::min<int64_t>(s.num_tiles, std::max(multiprocessors, 1))));
    return dim3(static_cast<unsigned>(s.m_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  }

  __device__ __forceinline__ static int64_t first_tile() {
    return (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  }
  __device__ __forceinline__ static int64_t stride(const Sm90TileSchedule& s) {
    return s.persistent ? static_cast<int64_t>(gridDim.x) : s.num_tiles;  // grid: one tile
  }

  // kVarlen: the tile's sequence bounds come from cu_seqlens (the schedule's m_blocks is that of
  // the longest sequence); a query block past its sequence's end has no rows and no key tiles:
  // neither role loads or stores anything for it.
  // kDynamic32: the dynamic kernel's decode, 32-bit only (tile_numbering.hpp).
  template <bool kVarlen, bool kDynamic32 = false>
  __device__ __forceinline__ static Sm90TileWork work(const ForwardParams& p, const Sm90TileSchedule& s,
                                                      int64_t tile) {
    Sm90TileWork w;
    const Sm90TileCoords c = sm90_tile_coords<kDynamic32>(s, tile);
    w.m_block = c.m_block;
    w.head = c.head;
    w.batch = c.batch;
    w.kv_head = c.kv_head;
    if constexpr (kVarlen) {
      w.q_start = p.cu_seqlens_q[w.batch];
      w.k_start = p.cu_seqlens_k[w.batch];
      w.len_q = p.cu_seqlens_q[w.batch + 1] - w.q_start;
      w.len_k = p.cu_seqlens_k[w.batch + 1] - w.k_start;
    } else {
      w.q_start = 0;
      w.k_start = 0;
      w.len_q = p.seqlen_q;
      w.len_k = p.seqlen_k;
    }
    w.q0 = w.m_block * T::kBlockM;
    w.q1 = min(w.q0 + T::kBlockM, w.len_q);
    // In 32 bits: the launcher clamped the windows (plan.hpp: kSm90MaxPositions).
    w.mask.left = static_cast<int>(p.window_left);
    w.mask.right = static_cast<int>(p.window_right);
    w.mask.offset = p.bottom_right ? w.len_k - w.len_q : 0;
    w.mask.seqlen_k = w.len_k;
    // Key tiles covering [key_begin, key_end): none when the window misses every key. Both are
    // in [0, len_k], so the divisions are unsigned (shifts, no sign fix-ups).
    const auto key_begin = static_cast<uint32_t>(w.mask.key_begin(w.q0));
    const auto key_end = static_cast<uint32_t>(w.mask.key_end(w.q1));
    w.n_begin = static_cast<int>(key_begin / T::kBlockN);
    w.n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : w.n_begin;
    if constexpr (kVarlen) {
      if (w.q0 >= w.len_q) w.n_end = w.n_begin;  // past the sequence (also empty ones): nothing
    }
    return w;
  }
};

}  // namespace fastattn::cuda
