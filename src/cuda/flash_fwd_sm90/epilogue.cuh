// epilogue.cuh — the sm90 forward's output: O / l as 16-bit values, and lse (natural log; rows
// that saw no key get O = 0 and lse = -inf).
//
// Two ways out (the plan chooses, heuristics.hpp; T::kOutputTile says whether the first is
// compiled):
//   TMA store   each consumer warpgroup writes its 64 rows to its slice of sO in shared memory
//               (the 128-byte swizzled panels TMA reads), then one thread issues a TMA store of
//               each panel and the warpgroup goes on to its next tile while the copy runs. The
//               direct stores below cost a consumer warpgroup about a fifth of its time on
//               short rows (ncu warp-state samples, H200, b32 h16 s512 d128, 2026-12-02: its
//               STG and the address arithmetic behind them, 32 four-byte stores a thread).
//               Padded calls whose out TMA can describe; TMA does not write past the tensor's
//               seqlen and head_dim, so a tile's padding rows and d = 96's padding columns stay
//               in shared memory.
//   direct      pairs of 16-bit values straight from the registers to global memory (any
//               16-byte aligned strides, rows past the sequence skipped): varlen calls (a TMA
//               box would write into the next sequence's rows), the tiles with no room for sO
//               (d = 256, the wide key tile), an out that TMA cannot describe, and the dynamic
//               scheduler's kernel.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/common/smem_layout.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd_sm90/consumer.cuh"
#include "cuda/flash_fwd_sm90/producer.cuh"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm90/bulk_reduce.cuh"
#include "cuda/sm90/tma.cuh"
#include "cuda/sm90/warpgroup.cuh"

namespace fastattn::cuda {

// Named barriers 4 + wg: consumer warpgroup wg alone, around its slice of sO (1: the V tail;
// 2, 3: the ordered issue; consumer.cuh).
constexpr int kBarOutputTile0 = 4;

template <class T, bool kVarlen>
__device__ __forceinline__ void store_lse_sm90(const ForwardParams& p, const Sm90TileWork& w, int row, float lse) {
  const int64_t token = kVarlen ? static_cast<int64_t>(w.q_start) + row : static_cast<int64_t>(row);
  p.lse[(kVarlen ? 0 : static_cast<int64_t>(w.batch) * p.lse_batch_stride) +
        static_cast<int64_t>(w.head) * p.lse_head_stride + token * p.lse_token_stride] = lse;
}

// Consumer warpgroup wg's 64 rows of the tile through its slice of sO and a TMA store.
// sO[wg]: (64, kHeadDimTile) 16-bit, kPanels panels of 64 x 128 bytes, 128-byte swizzle
// (PanelTile<64>, the layout of the map's box). One thread of the warpgroup owns its bulk
// async-group: before sO[wg] is written again it waits until the previous tile's store has read
// it, and the CTA's last wait is in kernel.cuh.
template <class T, bool kVarlen>
__device__ __forceinline__ void store_output_tile_sm90(Sm90ConsumerState<T>& st, const ForwardParams& p,
                                                       const Sm90TileWork& w, const Sm90Smem<T>& smem,
                                                       const CUtensorMap* map_o, const float (&inv_sum)[2],
                                                       const float (&lse)[2], int wg, int warp_in_wg, int lane) {
  using E = typename T::Element;
  using A = M16n8Fragments;
  using Layout = PanelTile<64>;
  const bool leader = warp_in_wg == 0 && lane == 0;
  // Through an opaque move: the stores' addresses are the same for every tile, and hoisted out
  // of the tile loop they held ~20 registers through the main loop (ptxas spilled 80-90 bytes).
  uint32_t sO;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(sO) : "r"(smem.o(wg)));
  if (leader) sm90::bulk_wait_group_read<0>();
  sm90::named_barrier_sync(kBarOutputTile0 + wg, sm90::kWarpgroupThreads);
  // A thread's rows r and r + 8 have the same swizzle phase (r & 7); its fragment nt is the
  // 16-byte chunk nt of those rows (kFragCols = 8 columns), at byte lane_col * 2 in it.
  const int row0 = warp_in_wg * 16 + A::lane_row(lane);  // of the warpgroup's 64
  const uint32_t row_base = sO + row0 * 128 + A::lane_col(lane) * 2;
  const int phase = row0 & 7;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float inv = inv_sum[half];
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt) {
      const uint32_t at = row_base + half * A::kHalfRows * 128 + (nt / 8) * Layout::kPanelBytes +
                          static_cast<uint32_t>(((nt % 8) ^ phase) * 16);
      const uint32_t pair = sm80::pack2<E>(st.acc_o[0][nt][2 * half] * inv, st.acc_o[0][nt][2 * half + 1] * inv);
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pair) : "memory");
    }
    const int row = row0 + half * A::kHalfRows;
    const int q_row = w.q0 + wg * 64 + row;
    if (p.lse != nullptr && A::row_leader(lane) && q_row < w.len_q) store_lse_sm90<T, kVarlen>(p, w, q_row, lse[half]);
  }
  sm90::fence_proxy_async_shared();  // the generic-proxy writes, before TMA (async proxy) reads them
  sm90::named_barrier_sync(kBarOutputTile0 + wg, sm90::kWarpgroupThreads);
  if (leader && w.q0 + wg * 64 < w.len_q) {
#pragma unroll
    for (int panel = 0; panel < T::kPanels; ++panel) {
      sm90::tma_store_4d(map_o, sO + panel * Layout::kPanelBytes, panel * 64, w.q0 + wg * 64, w.head, w.batch);
    }
    sm90::bulk_commit_group();
  }
}

// Varlen: rows are tokens q_start + row of the packed out (and lse [heads, total_q]); the row
// bound is what keeps a tile from writing into the next sequence's rows, and a tile past its
// sequence's end (or of an empty one) stores nothing.
template <class T, bool kVarlen>
__device__ __forceinline__ void store_output_sm90(Sm90ConsumerState<T>& st, const ForwardParams& p,
                                                  const Sm90TileWork& w, const Sm90Smem<T>& smem,
                                                  const CUtensorMap* map_o, bool tma_store, int wg, int warp_in_wg,
                                                  int lane) {
  using E = typename T::Element;
  using A = M16n8Fragments;
  float inv_sum[2], lse[2];
  st.softmax.template finalize<kSm90ApproxFinalize>(inv_sum, lse);
  if constexpr (T::kOutputTile && !kVarlen) {
    if (tma_store) return store_output_tile_sm90<T, kVarlen>(st, p, w, smem, map_o, inv_sum, lse, wg, warp_in_wg, lane);
  }
  E* o_ptr = static_cast<E*>(p.out) +
             (kVarlen ? static_cast<int64_t>(w.q_start) * p.o_token_stride
                      : static_cast<int64_t>(w.batch) * p.o_batch_stride) +
             static_cast<int64_t>(w.head) * p.o_head_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = w.q0 + wg * 64 + warp_in_wg * 16 + A::lane_row(lane) + half * A::kHalfRows;
    if (row >= w.len_q) continue;
    const float inv = inv_sum[half];
    E* o_row = o_ptr + static_cast<int64_t>(row) * p.o_token_stride + A::lane_col(lane);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesOStored; ++nt) {  // d = 96: not the padding columns
      *reinterpret_cast<uint32_t*>(o_row + nt * A::kFragCols) =
          sm80::pack2<E>(st.acc_o[0][nt][2 * half] * inv, st.acc_o[0][nt][2 * half + 1] * inv);
    }
    if (p.lse != nullptr && A::row_leader(lane)) store_lse_sm90<T, kVarlen>(p, w, row, lse[half]);
  }
}

}  // namespace fastattn::cuda
