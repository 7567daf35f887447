// dq_writer.cuh — how one step's dQ tile (dS K of one query block, fp32, unscaled: the convert
// kernel of flash_bwd/prepare.cuh multiplies by the softmax scale) reaches the global fp32
// accumulator dq_accum[total_q][heads][head_dim] (plan.hpp: Sm90DqReduction).
//
//   atomic  every MMA thread adds its kDqN / 4 float pairs with red.global.add.v2.f32.
//   bulk    each MMA warpgroup stages its tile in sdQ (padded fp32 rows) and one of its warps
//           adds it to global memory one row per cp.reduce.async.bulk (rows are contiguous
//           there; the tile is not, heads sit between rows).
//
// Deterministic mode (tile_scheduler.hpp): the adds of a (batch, head, query block) go in
// ascending key-block order. A semaphore per (batch, head, query block) counts finished adders;
// key block n waits until it counts every adder of the key blocks before it (rank * adders per
// CTA: the two MMA warpgroups), adds, then increments
// it with a release. Each element gets its adds in one fixed order: bitwise repeatable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd/tile_ops.cuh"
#include "cuda/flash_bwd_sm90/consumer.cuh"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/sm90/bulk_reduce.cuh"
#include "cuda/sm90/warpgroup.cuh"

namespace fastattn::cuda {

// The semaphore of (batch, head, query block) and this CTA's turn on it.
struct Sm90DqTurn {
  int* semaphore;
  int rank;  // adders (of all lower key blocks) to wait for
};
template <class T>
__device__ __forceinline__ Sm90DqTurn dq_turn(const BackwardParams& p, const Sm90BackwardWork& w, int head, int m,
                                             int adders_per_cta) {
  const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  Sm90DqTurn turn;
  turn.semaphore = p.dq_semaphores + (static_cast<int64_t>(w.batch) * p.num_heads + head) * m_blocks + m;
  turn.rank = adders_per_cta * (w.n_block - sm90_first_key_block(w.mask, m, T::kBlockM, T::kBlockN));
  return turn;
}

__device__ __forceinline__ void wait_for_turn(const Sm90DqTurn& turn) {
  while (sm90::load_acquire_gpu(turn.semaphore) < turn.rank) {
  }
}

// Global address of row `row` (of the sequence), column `col` of head `head`'s dQ accumulator.
template <class T>
__device__ __forceinline__ float* dq_accum_row(const BackwardParams& p, const Sm90BackwardWork& w, int head, int row,
                                              int col) {
  const int64_t row_elems = static_cast<int64_t>(p.num_heads) * T::kHeadDim;
  const int64_t first_row = T::kVarlen ? static_cast<int64_t>(w.q_start) : static_cast<int64_t>(w.batch) * p.seqlen_q;
  return p.dq_accum + (first_row + row) * row_elems +
         static_cast<int64_t>(head) * T::kHeadDim + col;
}

// Whether n8 slice nt of warpgroup wg's dQ tile holds columns of the head (d = 96: warpgroup 1's
// tile is columns 64..127 of the zero-padded K, and only 64..95 exist). Constant true for head
// dims without padding.
template <class T>
__device__ __forceinline__ bool dq_slice_exists(int wg, int nt) {
  return !T::kPaddedColumns || T::kDqN * wg + 8 * nt < T::kHeadDim;
}
// Columns of warpgroup wg's dQ tile that exist.
template <class T>
__device__ __forceinline__ int dq_tile_columns(int wg) {
  return T::kPaddedColumns && T::kHeadDim - T::kDqN * wg < T::kDqN ? T::kHeadDim - T::kDqN * wg : T::kDqN;
}

// Atomic mode, run by every thread of MMA warpgroup wg (t: its index in the warpgroup).
template <class T, bool kDeterministic>
__device__ __forceinline__ void add_dq_atomic(const float (&acc_dq)[T::kDqN / 8][4], const BackwardParams& p,
                                              const Sm90BackwardWork& w, const Sm90BwdStep& s, int wg, int t) {
  Sm90DqTurn turn{};
  if constexpr (kDeterministic) {
    turn = dq_turn<T>(p, w, s.head, s.m_block, T::kMmaWarpgroups);
    if (t == 0) wait_for_turn(turn);
    sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    sm90::fence_acq_rel_gpu();
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = s.q0 + sm90_layout::acc_row(t, 2 * half);
    if (row >= w.len_q) continue;
    float* dst = dq_accum_row<T>(p, w, s.head, row, T::kDqN * wg);
#pragma unroll
    for (int nt = 0; nt < T::kDqN / 8; ++nt) {
      if (!dq_slice_exists<T>(wg, nt)) continue;
      red_add_pair(dst + sm90_layout::acc_col(t, nt, 0), acc_dq[nt][2 * half], acc_dq[nt][2 * half + 1]);
    }
  }
  if constexpr (kDeterministic) {
    sm90::fence_acq_rel_gpu();
    sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    if (t == 0) sm90::add_release_gpu(turn.semaphore, 1);
  }
}

// Bulk mode, run by every thread of MMA warpgroup wg: stage the warpgroup's 64 x kDqN tile in
// its columns of sdQ, then warp 0 of the warpgroup adds it to global memory, one
// cp.reduce.async.bulk per row (lane l: rows l and l + 32), and goes on; the adds run on the TMA
// unit while the warpgroup starts the next step. The next step's staging first waits until
// those copies have read sdQ. (A separate writer warp in the producer warpgroup, as
// FlashAttention-3 has, made ptxas spill the 24-register producer code.)
template <class T, bool kDeterministic>
__device__ __forceinline__ void add_dq_bulk(const float (&acc_dq)[T::kDqN / 8][4], uint32_t s_dq,
                                            const BackwardParams& p, const Sm90BackwardWork& w, const Sm90BwdStep& s,
                                            int wg, int t) {
  const int warp = t / 32, lane = t % 32;
  if (warp == 0) sm90::bulk_wait_group_read<0>();  // the previous step's copies read sdQ
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = sm90_layout::acc_row(t, 2 * half);
#pragma unroll
    for (int nt = 0; nt < T::kDqN / 8; ++nt) {  // d = 96: the zero columns too (rows are 128 wide)
      const uint32_t addr =
          s_dq + sm90_layout::dq_stage_offset(T::kDqRowBytes, row, T::kDqN * wg + sm90_layout::acc_col(t, nt, 0));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(acc_dq[nt][2 * half]),
                   "f"(acc_dq[nt][2 * half + 1])
                   : "memory");
    }
  }
  sm90::fence_proxy_async_shared();  // the bulk copies read sdQ in the async proxy
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
  if (warp != 0) return;
  Sm90DqTurn turn{};
  if constexpr (kDeterministic) {
    turn = dq_turn<T>(p, w, s.head, s.m_block, T::kMmaWarpgroups);
    if (lane == 0) wait_for_turn(turn);
    __syncwarp();
    sm90::fence_acq_rel_gpu();
    sm90::fence_proxy_async_global();
  }
#pragma unroll
  for (int r = lane; r < T::kBlockM; r += 32) {
    if (s.q0 + r < w.len_q) {
      sm90::bulk_reduce_add_f32(dq_accum_row<T>(p, w, s.head, s.q0 + r, T::kDqN * wg),
                                s_dq + sm90_layout::dq_stage_offset(T::kDqRowBytes, r, T::kDqN * wg),
                                dq_tile_columns<T>(wg) * 4);
    }
  }
  sm90::bulk_commit_group();
  if constexpr (kDeterministic) {
    sm90::bulk_wait_group<0>();  // the adds are performed, not only read from sdQ
    sm90::fence_proxy_async_global();
    sm90::fence_acq_rel_gpu();
    __syncwarp();
    if (lane == 0) sm90::add_release_gpu(turn.semaphore, 1);
  }
}

// Bulk mode, after the last step: the copies are complete before the CTA's shared memory goes.
__device__ __forceinline__ void finish_dq_bulk(int t) {
  if (t / 32 == 0) sm90::bulk_wait_group<0>();
}

}  // namespace fastattn::cuda
