// epilogue.cuh — the sm90 forward's output: O / l as 16-bit pairs straight from the consumer's
// registers to global memory (any 16-byte aligned strides; rows past the sequence skipped),
// and lse (natural log; rows that saw no key get O = 0 and lse = -inf).
// A shared-memory staged TMA store is a tuning step for later (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd_sm90/consumer.cuh"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Varlen: rows are tokens q_start + row of the packed out (and lse [heads, total_q]); the row
// bound is what keeps a tile from writing into the next sequence's rows (a TMA store of the
// whole tile would), and a tile past its sequence's end (or of an empty one) stores nothing.
template <class T, bool kVarlen>
__device__ __forceinline__ void store_output_sm90(Sm90ConsumerState<T>& st, const ForwardParams& p,
                                                  const Sm90TileWork& w, int wg, int warp_in_wg, int lane) {
  using E = typename T::Element;
  using A = M16n8Fragments;
  float inv_sum[2], lse[2];
  st.softmax.finalize(inv_sum, lse);
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
    if (p.lse != nullptr && A::row_leader(lane)) {
      const int64_t token = kVarlen ? static_cast<int64_t>(w.q_start) + row : static_cast<int64_t>(row);
      p.lse[(kVarlen ? 0 : static_cast<int64_t>(w.batch) * p.lse_batch_stride) +
            static_cast<int64_t>(w.head) * p.lse_head_stride + token * p.lse_token_stride] = lse[half];
    }
  }
}

}  // namespace fastattn::cuda
