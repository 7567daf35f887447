// epilogue.cuh — the sm90 backward's dK (times the softmax scale) and dV: 16-bit pairs straight
// from the MMA warpgroups' registers to global memory, rows past the key sequence skipped. With
// GQA the CTA already summed every query head of its KV head, so each element is written once.
// A key block no query sees writes zeros (its accumulators never moved). Warpgroup wg writes
// keys kWgKeyRows wg.., columns kWgDkvCols wg.. (traits.cuh).
// A shared-memory staged TMA store is a tuning step for later.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd_sm90/consumer.cuh"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

template <class T>
__device__ __forceinline__ void store_key_gradients(const Sm90BwdMmaState<T>& st, const BackwardParams& p,
                                                    const Sm90BackwardWork& w, int wg, int t) {
  using E = typename T::Element;
  // Varlen: rows from the sequence's first key token (batch strides unused).
  E* dk = static_cast<E*>(p.dk) +
          (T::kVarlen ? static_cast<int64_t>(w.k_start) * p.dk_token_stride
                      : static_cast<int64_t>(w.batch) * p.dk_batch_stride) +
          static_cast<int64_t>(w.kv_head) * p.dk_head_stride;
  E* dv = static_cast<E*>(p.dv) +
          (T::kVarlen ? static_cast<int64_t>(w.k_start) * p.dv_token_stride
                      : static_cast<int64_t>(w.batch) * p.dv_batch_stride) +
          static_cast<int64_t>(w.kv_head) * p.dv_head_stride;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int j = w.k0 + T::kWgKeyRows * wg + sm90_layout::acc_row(t, 2 * half);
    if (j >= w.len_k) continue;
    E* dk_row = dk + static_cast<int64_t>(j) * p.dk_token_stride;
    E* dv_row = dv + static_cast<int64_t>(j) * p.dv_token_stride;
#pragma unroll
    for (int nt = 0; nt < T::kNTilesD; ++nt) {
      if (T::kPaddedColumns && 8 * nt >= T::kHeadDim) continue;  // d = 96: padding columns
      const int col = T::kWgDkvCols * wg + sm90_layout::acc_col(t, nt, 0);
      *reinterpret_cast<uint32_t*>(dk_row + col) =
          sm80::pack2<E>(st.acc_dk[nt][2 * half] * p.scale, st.acc_dk[nt][2 * half + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv_row + col) = sm80::pack2<E>(st.acc_dv[nt][2 * half], st.acc_dv[nt][2 * half + 1]);
    }
  }
}

}  // namespace fastattn::cuda
