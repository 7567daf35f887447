// producer.cuh — the sm90 forward's load side: one thread of the producer warpgroup issues
// every TMA load of the CTA (Q once, then K and V tiles into a kStages-deep ring).
//
// Barriers (traits.cuh has their place in shared memory):
//   q_full         Q landed (one arrival with the byte count, then TMA's bytes)
//   k_full[s]      K tile of stage s landed;  v_full[s] likewise for V, so S = Q K^T can start
//                  while V is still in flight
//   k_empty[s]     every consumer thread is done with the K tile of stage s (kConsumerThreads
//                  arrivals, as soon as its S = Q K^T landed; one per consumer warpgroup with
//                  kSm90ElectedRelease); v_empty[s] likewise for V (after O += P V). Separate,
//                  so the next K load starts a GEMM earlier than the V one.
//                  Two-CTA clusters (plan.hpp: sm90_cluster): each CTA's loads fill the stage in
//                  both CTAs, so its empty barriers count one arrival per consumer warpgroup of
//                  the cluster (consumer.cuh: release_kv_stage), and k_full / v_full the bytes of
//                  both CTAs' loads.
//   q_empty        every consumer thread is done with Q (its last S = Q K^T of the tile landed):
//                  the next tile's Q may be loaded (persistent scheduler, tile_scheduler.cuh)
// Key tile i of the CTA (counted over all its tiles, Sm90PipelineCount::kv) goes to stage
// s = i % kStages, its use u = i / kStages is phase u of the stage's barriers: consumers wait on
// k_full/v_full with parity u & 1; the producer, before refilling for use u >= 1, waits for
// k_empty's / v_empty's phase u - 1. The CTA's j-th Q load (Sm90PipelineCount::q) is phase j of
// q_full; before it (j >= 1) the producer waits for phase j - 1 of q_empty.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/tma.cuh"

namespace fastattn::cuda {

// Arrivals per phase on a K/V stage's empty barrier (consumer.cuh: release_kv_stage): every
// consumer thread of the CTA; with kSm90ElectedRelease one per consumer warpgroup; with
// two-CTA clusters one per consumer warpgroup of the cluster.
template <class T, bool kCluster>
constexpr uint32_t sm90_kv_empty_arrivals() {
  return kCluster              ? kSm90ClusterSize * T::kConsumerWarpgroups
         : kSm90ElectedRelease ? T::kConsumerWarpgroups
                               : T::kConsumerThreads;
}

// Shared-memory addresses of one CTA's tiles and barriers (traits.cuh).
template <class T>
struct Sm90Smem {
  uint32_t base;  // 1024-byte aligned
  __device__ __forceinline__ uint32_t q() const { return base; }
  __device__ __forceinline__ uint32_t k(int stage) const { return base + T::kOffsetK + stage * T::kSmemKV; }
  __device__ __forceinline__ uint32_t v(int stage) const { return base + T::kOffsetV + stage * T::kSmemKV; }
  // Consumer warpgroup wg's 64 output rows (T::kOutputTile only).
  __device__ __forceinline__ uint32_t o(int wg) const { return base + T::kOffsetO + wg * T::kSmemOWarpgroup; }
  __device__ __forceinline__ uint32_t q_full() const { return base + T::kOffsetBarriers; }
  __device__ __forceinline__ uint32_t k_full(int stage) const { return q_full() + 8 * (1 + stage); }
  __device__ __forceinline__ uint32_t v_full(int stage) const { return q_full() + 8 * (1 + T::kStages + stage); }
  __device__ __forceinline__ uint32_t k_empty(int stage) const { return q_full() + 8 * (1 + 2 * T::kStages + stage); }
  __device__ __forceinline__ uint32_t v_empty(int stage) const { return q_full() + 8 * (1 + 3 * T::kStages + stage); }
  __device__ __forceinline__ uint32_t q_empty() const { return q_full() + 8 * (1 + 4 * T::kStages); }
  // The dynamic scheduler's hand-over (kernel_dynamic.cuh): a ring of two tile numbers, each
  // with a full barrier (the fetcher thread stored it) and an empty one (the load thread and
  // every consumer thread read it).
  __device__ __forceinline__ uint32_t tile_full(int slot) const { return q_full() + 8 * (2 + 4 * T::kStages + slot); }
  __device__ __forceinline__ uint32_t tile_empty(int slot) const { return q_full() + 8 * (4 + 4 * T::kStages + slot); }
  __device__ __forceinline__ uint32_t tile_slot(int slot) const { return q_full() + 8 * (6 + 4 * T::kStages + slot); }

  // kv_empty_arrivals: of k_empty / v_empty per phase (sm90_kv_empty_arrivals).
  __device__ __forceinline__ void init_barriers(uint32_t kv_empty_arrivals = sm90_kv_empty_arrivals<T, false>()) const {
    sm90::mbarrier_init(q_full(), 1);
    sm90::mbarrier_init(q_empty(), T::kConsumerThreads);
#pragma unroll
    for (int s = 0; s < T::kStages; ++s) {
      sm90::mbarrier_init(k_full(s), 1);
      sm90::mbarrier_init(v_full(s), 1);
      sm90::mbarrier_init(k_empty(s), kv_empty_arrivals);
      sm90::mbarrier_init(v_empty(s), kv_empty_arrivals);
    }
    sm90::fence_barrier_init();
  }
  // dynamic scheduler only, before init_barriers() (whose fence covers these too).
  __device__ __forceinline__ void init_tile_barriers() const {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      sm90::mbarrier_init(tile_full(s), 1);
      sm90::mbarrier_init(tile_empty(s), T::kConsumerThreads + 1);
    }
  }
};

// A (rows, kHeadDim) tile: kPanels boxes of (64 columns, rows), side by side in shared memory.
// kShared (two-CTA clusters, plan.hpp: sm90_cluster): CTA `rank` loads the panels p with
// p % 2 == rank and multicasts each into both CTAs' shared memory, counted on each CTA's barrier
// of the same offset; each CTA's producer expects the whole tile's bytes on its own barrier
// (half land from the other CTA's loads).
template <class T, bool kShared = false>
__device__ __forceinline__ void tma_load_tile(uint32_t smem, uint32_t panel_bytes, const CUtensorMap* map,
                                              uint32_t bar, int row0, int head, int batch, int rank = 0) {
  static_assert(!kShared || T::kPanels % kSm90ClusterSize == 0, "the cluster's CTAs load the panels in turn");
  constexpr uint16_t kBothCtas = (1u << kSm90ClusterSize) - 1u;
#pragma unroll
  for (int panel = 0; panel < T::kPanels; ++panel) {
    if constexpr (kShared) {
      if (panel % kSm90ClusterSize == rank) {
        sm90::tma_load_4d_multicast(smem + panel * panel_bytes, map, bar, kBothCtas, panel * 64, row0, head, batch);
      }
    } else {
      sm90::tma_load_4d(smem + panel * panel_bytes, map, bar, panel * 64, row0, head, batch);
    }
  }
}

// One tile's loads, on one thread: K of its first key tile, then Q (once the consumers are
// done with the previous tile's Q: the K load overlaps their last GEMMs), then the V of that key
// tile and the (K, V) of the others. Nothing to load when the query block sees no key.
// Varlen: the tensor maps are over the packed tokens (one batch), each tile loaded at its
// sequence's offset. TMA does not stop at a sequence's end: a tile that reaches past it holds
// the next sequence's rows (zeros only past the tensor's end), which the consumers mask (keys)
// and the epilogue never stores (queries).
// kCluster: K and V shared with the cluster's other CTA (tma_load_tile, `rank`: this CTA's in the cluster); the
// cluster's two CTAs run tiles with the same key tiles, so their rings stay in step.
template <class T, bool kVarlen, bool kCluster = false>
__device__ __forceinline__ void produce(const Sm90Smem<T>& smem, const Sm90TileWork& w, Sm90PipelineCount& count,
                                        const CUtensorMap* map_q, const CUtensorMap* map_k,
                                        const CUtensorMap* map_v, int rank = 0) {
  if (!w.has_keys()) return;
  const int tiles = w.n_end - w.n_begin;
  const int batch = kVarlen ? 0 : w.batch;  // TMA coordinates
  const int q_row0 = kVarlen ? w.q_start + w.q0 : w.q0;
  for (int i = 0; i < tiles; ++i) {
    const int it = count.kv + i;
    const int stage = it % T::kStages, use = it / T::kStages;
    const int k0 = (w.n_end - 1 - i) * T::kBlockN + (kVarlen ? w.k_start : 0);
    if (use > 0) sm90::mbarrier_wait<kCluster>(smem.k_empty(stage), (use - 1) & 1);
    sm90::mbarrier_arrive_expect_tx(smem.k_full(stage), T::kSmemKV);
    tma_load_tile<T, kCluster>(smem.k(stage), T::kPanelBytesKV, map_k, smem.k_full(stage), k0, w.kv_head, batch, rank);
    if (i == 0) {
      if (count.q > 0) sm90::mbarrier_wait(smem.q_empty(), (count.q - 1) & 1);
      sm90::mbarrier_arrive_expect_tx(smem.q_full(), T::kSmemQ);
      tma_load_tile<T>(smem.q(), T::kPanelBytesQ, map_q, smem.q_full(), q_row0, w.head, batch);
    }
    if (use > 0) sm90::mbarrier_wait<kCluster>(smem.v_empty(stage), (use - 1) & 1);
    sm90::mbarrier_arrive_expect_tx(smem.v_full(stage), T::kSmemKV);
    tma_load_tile<T, kCluster>(smem.v(stage), T::kPanelBytesKV, map_v, smem.v_full(stage), k0, w.kv_head, batch, rank);
  }
  count.kv += tiles;
  count.q += 1;
}

// Two-CTA clusters, after the CTA's last tile: waits until every stage the ring used was released
// by the consumers of both CTAs (the waits the next loads would make). The other CTA's consumers
// arrive on this CTA's k_empty / v_empty, so this CTA, whose shared memory holds them, must not
// exit before those arrivals (CUTLASS's producer tail does the same).
template <class T>
__device__ __forceinline__ void produce_tail(const Sm90Smem<T>& smem, const Sm90PipelineCount& count) {
  for (int it = count.kv; it < count.kv + T::kStages; ++it) {
    const int stage = it % T::kStages, use = it / T::kStages;
    if (use > 0) {
      sm90::mbarrier_wait<true>(smem.k_empty(stage), (use - 1) & 1);
      sm90::mbarrier_wait<true>(smem.v_empty(stage), (use - 1) & 1);
    }
  }
}

}  // namespace fastattn::cuda
