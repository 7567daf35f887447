// producer.cuh — the sm90 backward's load side: warp 0 of the producer warpgroup. Lane 0
// issues every TMA load (K and V once, then Q and dO per step into a kStages-deep ring); all 32
// lanes copy the step's lse and D into shared memory beside them.
//
// Barriers (traits.cuh has their place):
//   kv_full       K and V landed (one arrival with the byte count, then TMA's bytes)
//   q_full[s]     stage s holds the step's Q, dO (TMA bytes) and lse, D (32 arrivals: lane 0's
//                 arrive.expect_tx and 31 plain arrivals, each after the lane's own lse/D
//                 stores, which the arrival releases to the waiters' acquire)
//   q_empty[s]    every MMA thread is done with stage s (kMmaThreads arrivals, after the dV/dK
//                 GEMMs that read Q and dO, before the dQ output)
//   dq_full[b][wg], dq_empty[b][wg]   the dQ writer warps' hand-offs with MMA warpgroup wg
//                 of sdQ buffer b (dq_writer.cuh; one arrival each per step that uses the
//                 buffer, by the step's writer; used only by kernels with the writer)
// Use u = i / kStages of stage s = i % kStages is phase u of its barriers: the MMA threads wait
// on q_full with parity u & 1; the producer, before refilling for use u >= 1, waits for
// q_empty's phase u - 1.
#pragma once

#include <cuda.h>

#include <cmath>
#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/tma.cuh"

namespace fastattn::cuda {

// Shared-memory addresses of one CTA's tiles and barriers (traits.cuh).
template <class T>
struct Sm90BwdSmem {
  uint32_t base;  // 1024-byte aligned
  __device__ __forceinline__ uint32_t k() const { return base; }
  __device__ __forceinline__ uint32_t v() const { return base + T::kOffsetV; }
  __device__ __forceinline__ uint32_t q(int stage) const { return base + T::kOffsetQ + stage * T::kSmemQ; }
  __device__ __forceinline__ uint32_t dout(int stage) const { return base + T::kOffsetDO + stage * T::kSmemQ; }
  __device__ __forceinline__ uint32_t ds(int buffer) const { return base + T::kOffsetDS + buffer * T::kSmemDS; }
  // MMA warpgroup wg's dQ tile in sdQ buffer `buffer` (step i: buffer i % T::kDqBuffers).
  __device__ __forceinline__ uint32_t dq_tile(int wg, int buffer) const {
    return base + T::kOffsetDQ + (buffer * T::kMmaWarpgroups + wg) * T::kDqTileBytes;
  }
  __device__ __forceinline__ uint32_t lse(int stage) const { return base + T::kOffsetLse + stage * T::kBlockM * 4; }
  __device__ __forceinline__ uint32_t dsum(int stage) const { return base + T::kOffsetD + stage * T::kBlockM * 4; }
  __device__ __forceinline__ uint32_t kv_full() const { return base + T::kOffsetBarriers; }
  __device__ __forceinline__ uint32_t q_full(int stage) const { return kv_full() + 8 * (1 + stage); }
  __device__ __forceinline__ uint32_t q_empty(int stage) const { return kv_full() + 8 * (1 + T::kStages + stage); }
  // The dQ writer warps' hand-offs (dq_writer.cuh), one pair per MMA warpgroup and sdQ buffer.
  __device__ __forceinline__ uint32_t dq_full(int wg, int buffer) const {
    return kv_full() + 8 * (1 + 2 * T::kStages + buffer * T::kMmaWarpgroups + wg);
  }
  __device__ __forceinline__ uint32_t dq_empty(int wg, int buffer) const {
    return kv_full() + 8 * (1 + 2 * T::kStages + (T::kDqBuffers + buffer) * T::kMmaWarpgroups + wg);
  }

  __device__ __forceinline__ void init_barriers() const {
    sm90::mbarrier_init(kv_full(), 1);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      sm90::mbarrier_init(q_full(s), 32);
      sm90::mbarrier_init(q_empty(s), T::kMmaThreads);
    }
    if constexpr (kSm90BwdDqWriter) {
#pragma unroll
      for (int b = 0; b < T::kDqBuffers; ++b) {
#pragma unroll
        for (int wg = 0; wg < T::kMmaWarpgroups; ++wg) {
          sm90::mbarrier_init(dq_full(wg, b), 1);
          sm90::mbarrier_init(dq_empty(wg, b), 1);
        }
      }
    }
    sm90::fence_barrier_init();
  }
};

__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

// A (rows, kHeadDim) tile: kPanels boxes of (64 columns, rows), side by side in shared memory.
template <class T>
__device__ __forceinline__ void tma_load_rows(uint32_t smem, uint32_t panel_bytes, const CUtensorMap* map, uint32_t bar,
                                              int row0, int head, int batch) {
#pragma unroll
  for (int panel = 0; panel < T::kPanels; ++panel) {
    sm90::tma_load_4d(smem + panel * panel_bytes, map, bar, panel * 64, row0, head, batch);
  }
}

// Runs on the 32 lanes of producer warp 0. Nothing to load when no query sees the key block.
template <class T>
__device__ __forceinline__ void produce_backward(const Sm90BwdSmem<T>& smem, const BackwardParams& p,
                                                 const Sm90BackwardWork& w, const CUtensorMap* map_q,
                                                 const CUtensorMap* map_k, const CUtensorMap* map_v,
                                                 const CUtensorMap* map_do, int lane) {
  if (w.steps == 0) return;
  if (lane == 0) {
    sm90::prefetch_tensor_map(map_q);
    sm90::prefetch_tensor_map(map_do);
    sm90::prefetch_tensor_map(map_k);
    sm90::prefetch_tensor_map(map_v);
    sm90::mbarrier_arrive_expect_tx(smem.kv_full(), 2 * T::kSmemKV);
    // Varlen: the maps are (d, total tokens, heads, 1), rows from the sequence's first token.
    const int k_row = T::kVarlen ? w.k_start + w.k0 : w.k0, tma_batch = T::kVarlen ? 0 : w.batch;
    tma_load_rows<T>(smem.k(), T::kPanelBytesKV, map_k, smem.kv_full(), k_row, w.kv_head, tma_batch);
    tma_load_rows<T>(smem.v(), T::kPanelBytesKV, map_v, smem.kv_full(), k_row, w.kv_head, tma_batch);
  }
  constexpr float kLog2e = 1.4426950408889634f;
  // Step i is (head, m): heads ascending, query blocks descending (ascending in deterministic
  // mode's shortest-first order; tile_scheduler.hpp: Sm90BackwardWork::m_block), kept as running
  // counters (Sm90StepCursor: no divisions, few registers: this warp has 24).
  Sm90StepCursor cursor = Sm90StepCursor::first(w);
  for (int i = 0; i < w.steps; ++i) {
    const int head = cursor.head, m = cursor.m_block;
    const int stage = i % T::kStages, use = i / T::kStages;
    const int q0 = m * T::kBlockM;
    if (use > 0) sm90::mbarrier_wait(smem.q_empty(stage), (use - 1) & 1);
    const float* lse = p.lse +
                       (T::kVarlen ? static_cast<int64_t>(w.q_start) * p.lse_token_stride
                                   : static_cast<int64_t>(w.batch) * p.lse_batch_stride) +
                       static_cast<int64_t>(head) * p.lse_head_stride;
    const float* dsum = p.d_sum + static_cast<int64_t>(head) * p.total_q +
                        (T::kVarlen ? static_cast<int64_t>(w.q_start) : static_cast<int64_t>(w.batch) * p.seqlen_q);
#pragma unroll
    for (int r = lane; r < T::kBlockM; r += 32) {
      const int row = q0 + r;
      // lse in log2 units; a row that saw no key in the forward (lse = -inf) and a row past
      // the sequence get +inf: P = exp2(S * scale_log2 - inf) = 0 for all their keys.
      float l2 = INFINITY, d = 0.0f;
      if (row < w.len_q) {
        const float l = lse[static_cast<int64_t>(row) * p.lse_token_stride];
        l2 = l == -INFINITY ? INFINITY : l * kLog2e;
        d = dsum[row];
      }
      st_shared_f32(smem.lse(stage) + r * 4, l2);
      st_shared_f32(smem.dsum(stage) + r * 4, d);
    }
    if (lane == 0) {
      sm90::mbarrier_arrive_expect_tx(smem.q_full(stage), 2 * T::kSmemQ);
      // Varlen: rows past the sequence are the next sequence's (or TMA's zeros past the last):
      // their lse is +inf and D 0 above, so P = 0 and dS = 0 for them, and no dQ row past len_q
      // is added; the MMA warpgroups zero their Q and dO (consumer.cuh), since 0 x a
      // non-finite value there would still be NaN. K and V rows past the keys likewise.
      const int q_row = T::kVarlen ? w.q_start + q0 : q0, tma_batch = T::kVarlen ? 0 : w.batch;
      tma_load_rows<T>(smem.q(stage), T::kPanelBytesQ, map_q, smem.q_full(stage), q_row, head, tma_batch);
      tma_load_rows<T>(smem.dout(stage), T::kPanelBytesQ, map_do, smem.q_full(stage), q_row, head, tma_batch);
    } else {
      sm90::mbarrier_arrive(smem.q_full(stage));
    }
    cursor.advance(w);
  }
}

}  // namespace fastattn::cuda
