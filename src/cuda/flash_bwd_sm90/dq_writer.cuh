// dq_writer.cuh — how one step's dQ tile (dS K of one query block, fp32, unscaled: the convert
// kernel of flash_bwd/prepare.cuh multiplies by the softmax scale) reaches the global fp32
// accumulator dq_accum[total_q][heads][head_dim] (plan.hpp: Sm90DqReduction).
//
//   atomic  every MMA thread adds its 16 float pairs with red.global.add.v2.f32.
//   bulk    the MMA threads store the tile into sdQ (padded fp32 rows), and warp 1 of the
//           producer warpgroup adds it to global memory one row per cp.reduce.async.bulk
//           (rows are contiguous there; the tile is not, heads sit between rows). Named
//           barriers hand sdQ back and forth: kBarDqFull (written) and kBarDqEmpty (read by the
//           bulk copies), both kMmaThreads + 32 threads.
//
// Deterministic mode (tile_scheduler.hpp): the adds of a (batch, head, query block) go in
// ascending key-block order. A semaphore per (batch, head, query block) counts finished adders;
// key block n waits until it counts every adder of the key blocks before it (rank * adders per
// CTA: the two MMA warpgroups in atomic mode, the dQ warp in bulk mode), adds, then increments
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
  return p.dq_accum + (static_cast<int64_t>(w.batch) * p.seqlen_q + row) * row_elems +
         static_cast<int64_t>(head) * T::kHeadDim + col;
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
    const int row = s.q0 + T::kDqRow0 * wg + sm90_layout::acc_row(t, 2 * half);
    if (row >= w.len_q) continue;
    float* dst = dq_accum_row<T>(p, w, s.head, row, T::kDqCol0 * wg);
#pragma unroll
    for (int nt = 0; nt < T::kDqN / 8; ++nt) {
      red_add_pair(dst + sm90_layout::acc_col(t, nt, 0), acc_dq[nt][2 * half], acc_dq[nt][2 * half + 1]);
    }
  }
  if constexpr (kDeterministic) {
    sm90::fence_acq_rel_gpu();
    sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    if (t == 0) sm90::add_release_gpu(turn.semaphore, 1);
  }
}

// Bulk mode, MMA side: wait until the dQ warp has read the previous tile, store this one.
template <class T>
__device__ __forceinline__ void stage_dq(const float (&acc_dq)[T::kDqN / 8][4], uint32_t s_dq, int wg, int t) {
  sm90::named_barrier_sync(kBarDqEmpty, T::kMmaThreads + 32);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = T::kDqRow0 * wg + sm90_layout::acc_row(t, 2 * half);
#pragma unroll
    for (int nt = 0; nt < T::kDqN / 8; ++nt) {
      const uint32_t addr =
          s_dq + sm90_layout::dq_stage_offset(T::kDqRowBytes, row, T::kDqCol0 * wg + sm90_layout::acc_col(t, nt, 0));
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(acc_dq[nt][2 * half]),
                   "f"(acc_dq[nt][2 * half + 1])
                   : "memory");
    }
  }
  sm90::fence_proxy_async_shared();  // the bulk copies read sdQ in the async proxy
  sm90::named_barrier_arrive(kBarDqFull, T::kMmaThreads + 32);
}

// Bulk mode, the dQ warp (warp 1 of the producer warpgroup, all 32 lanes): per step, wait for
// the staged tile, add its rows (lane l: rows l, l + 32, ...), hand sdQ back once read.
template <class T, bool kDeterministic>
__device__ __forceinline__ void write_dq_bulk(const BackwardParams& p, const Sm90BackwardWork& w, uint32_t s_dq,
                                              int lane) {
  if (w.steps == 0) return;
  sm90::named_barrier_arrive(kBarDqEmpty, T::kMmaThreads + 32);  // sdQ starts empty
  for (int i = 0; i < w.steps; ++i) {
    const int head = w.head(i), m = w.m_block(i), q0 = m * T::kBlockM;
    sm90::named_barrier_sync(kBarDqFull, T::kMmaThreads + 32);
    Sm90DqTurn turn{};
    if constexpr (kDeterministic) {
      turn = dq_turn<T>(p, w, head, m, 1);
      if (lane == 0) wait_for_turn(turn);
      __syncwarp();
      sm90::fence_acq_rel_gpu();
      sm90::fence_proxy_async_global();
    }
    for (int r = lane; r < T::kBlockM; r += 32) {
      if (q0 + r >= w.len_q) break;
      sm90::bulk_reduce_add_f32(dq_accum_row<T>(p, w, head, q0 + r, 0),
                                s_dq + sm90_layout::dq_stage_offset(T::kDqRowBytes, r, 0), T::kHeadDim * 4);
    }
    sm90::bulk_commit_group();
    if constexpr (kDeterministic) {
      sm90::bulk_wait_group<0>();  // the adds are performed, not only read from sdQ
      sm90::fence_proxy_async_global();
      sm90::fence_acq_rel_gpu();
      __syncwarp();
      if (lane == 0) sm90::add_release_gpu(turn.semaphore, 1);
    } else {
      sm90::bulk_wait_group_read<0>();
    }
    __syncwarp();
    if (i + 1 < w.steps) sm90::named_barrier_arrive(kBarDqEmpty, T::kMmaThreads + 32);
  }
  sm90::bulk_wait_group<0>();
}

}  // namespace fastattn::cuda
