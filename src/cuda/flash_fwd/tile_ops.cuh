// tile_ops.cuh — the forward kernels' tile operations: global -> shared copy of a tile,
// S = Q K^T and O += P V on MMA fragments, and scores -> masked log2-domain logits.
// Shared by the main kernel (kernel.cuh) and the short-query kernel (kernel_decode.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fragment_address.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace fastattn::cuda {

// Copies a (kRows, kHeadDim) tile from global memory (rows token_stride apart) into a swizzled
// shared tile; rows at or past rows_valid are zero-filled so padded keys contribute 0 * 0.
// Addresses are worked out once per thread (sm80/tile_copy.cuh).
template <class T, int kRows>
__device__ __forceinline__ void load_tile(uint32_t smem, const typename T::Element* gmem,
                                          int64_t token_stride, int rows_valid) {
  sm80::TileCopy<kRows, T::kHeadDim, T::kThreads, typename T::Layout>::copy(smem, gmem, token_stride, rows_valid,
                                                                           static_cast<int>(threadIdx.x));
}

// acc_s (kMTiles x kNTilesS n8 tiles) = Q_warp K^T over the whole head_dim. ldmatrix operands
// and the m16n8k16 fragment layout: the sm80 and sm75 paths (T::Arch::mma is one m16n8k16, or
// two m16n8k8 on sm75); sm70 has its own (sm70/forward_arch.cuh).
// FragQ / FragK: how the Q and K tiles lie in shared memory (fragment_address.cuh; the KV-cache
// kernel's TMA loads give K as 64-column panels).
template <class T, class FragQ = FragmentAddress<T::kSmemRowElems, LanePattern::kA>,
          class FragK = FragmentAddress<T::kSmemRowElems, LanePattern::kB>>
__device__ __forceinline__ void gemm_qk(float (&acc_s)[T::kMTiles][T::kNTilesS][4], uint32_t sQ,
                                        uint32_t sK, int warp_row0, int lane) {
  // warp_row0 is a multiple of 16, so every A row block starts on a multiple of 8.
  const FragQ frag_q(sQ, lane);
  const FragK frag_k(sK, lane);
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < T::kKStepsQK; ++kk) {
    uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
      sm80::ldmatrix_x4(a[mt], frag_q.at(warp_row0 + mt * 16, kk * 2));
    }
#pragma unroll
    for (int np = 0; np < T::kNTilesS / 2; ++np) {
      uint32_t b[4];  // b[0..1]: n-tile 2np, b[2..3]: n-tile 2np + 1
      sm80::ldmatrix_x4(b, frag_k.at(np * 16, kk * 2));
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        T::Arch::template mma<typename T::Element>(acc_s[mt][2 * np], a[mt], b_lo);
        T::Arch::template mma<typename T::Element>(acc_s[mt][2 * np + 1], a[mt], b_hi);
      }
    }
  }
}

// acc_o (kMTiles x kNTilesO) += P V, with P taken from the S accumulators in registers.
template <class T, class FragV = FragmentAddress<T::kSmemRowElems, LanePattern::kBTrans>>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                        const float (&p)[T::kMTiles][T::kNTilesS][4], uint32_t sV,
                                        int lane) {
  using E = typename T::Element;
  const FragV frag_v(sV, lane);
#pragma unroll
  for (int kp = 0; kp < T::kKStepsPV; ++kp) {
    uint32_t a[T::kMTiles][4];  // two S n8-tiles form one A k16-tile (see mma.cuh)
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
      a[mt][0] = sm80::pack2<E>(p[mt][2 * kp][0], p[mt][2 * kp][1]);
      a[mt][1] = sm80::pack2<E>(p[mt][2 * kp][2], p[mt][2 * kp][3]);
      a[mt][2] = sm80::pack2<E>(p[mt][2 * kp + 1][0], p[mt][2 * kp + 1][1]);
      a[mt][3] = sm80::pack2<E>(p[mt][2 * kp + 1][2], p[mt][2 * kp + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < T::kNTilesO / 2; ++dp) {
      uint32_t b[4];  // V is (keys, head_dim) row-major: the transposed load gives col-major B
      sm80::ldmatrix_x4_trans(b, frag_v.at(kp * 16, dp * 2));
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        T::Arch::template mma<E>(acc_o[mt][2 * dp], a[mt], b_lo);
        T::Arch::template mma<E>(acc_o[mt][2 * dp + 1], a[mt], b_hi);
      }
    }
  }
}

// Scores for the softmax, which applies the log2-domain scale itself (softmax.cuh, folded into
// the exponent's FFMA): soft-capped, softcap * tanh(s * softcap_pre_scale) (the softmax scale is
// then log2 e), or negated when the softmax scale is negative (exp_scale = |scale_log2|). The
// forward kernels and the KV-cache kernel (kv_cache_tile.cuh) share it.
template <class T, bool kSoftcap>
__device__ __forceinline__ void cap_or_negate_scores(float (&acc_s)[T::kMTiles][T::kNTilesS][4], float softcap,
                                                     float softcap_pre_scale, float scale_log2) {
  if constexpr (kSoftcap) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = softcap * tanhf(acc_s[mt][nt][e] * softcap_pre_scale);
  } else if (scale_log2 < 0.0f) {  // uniform: a branch around the loop, not a select per score
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = -acc_s[mt][nt][e];
  }
}

// O zeroed before a row block's first key tile.
template <class T>
__device__ __forceinline__ void clear_output(float (&acc_o)[T::kMTiles][T::kNTilesO][4]) {
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nt][e] = 0.0f;
}

// O scaled by the online softmax's per-row factors (OnlineSoftmax::update's rescale): factor 2 mt
// for the fragment's rows lane / 4 of MMA tile mt, 2 mt + 1 for rows lane / 4 + 8.
template <class T>
__device__ __forceinline__ void rescale_output(float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                               const float (&rescale)[2 * T::kMTiles]) {
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt) {
      acc_o[mt][nt][0] *= rescale[2 * mt];
      acc_o[mt][nt][1] *= rescale[2 * mt];
      acc_o[mt][nt][2] *= rescale[2 * mt + 1];
      acc_o[mt][nt][3] *= rescale[2 * mt + 1];
    }
}

// The scores (cap_or_negate_scores), then the mask (kMasked: partial tiles). For a partial tile
// each row's visible keys are one interval [lo, hi] (mask.hpp), compared in 32 bits.
// kLeftBound = false (no window on the left: causal, or only keys past len_k): lo = 0 <= j, so
// only the upper end is compared, one compare per score instead of two (the same -inf set).
template <class T, bool kSoftcap, bool kMasked, bool kLeftBound = true>
__device__ __forceinline__ void scale_and_mask_tile(float (&acc_s)[T::kMTiles][T::kNTilesS][4],
                                                    const ForwardParams& p, int q_row0, int k0, int len_k,
                                                    int diagonal, int window_left, int window_right, int lane) {
  using A = typename T::Arch;  // accumulator fragment coordinates
  cap_or_negate_scores<T, kSoftcap>(acc_s, p.softcap, p.softcap_pre_scale, p.scale_log2);
  if constexpr (kMasked) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int lo = 0, hi = len_k - 1;
        const int i = q_row0 + mt * A::kTileRows + A::lane_row(lane) + half * A::kHalfRows;
        const long long d = static_cast<long long>(i) + diagonal;  // 64-bit: no overflow
        if (kLeftBound && window_left >= 0) lo = static_cast<int>(max(0LL, d - window_left));
        if (window_right >= 0) hi = static_cast<int>(min(static_cast<long long>(hi), d + window_right));
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            const int j = k0 + nt * A::kFragCols + A::lane_col(lane) + (e & 1);
            if ((kLeftBound && j < lo) || j > hi) acc_s[mt][nt][e] = -INFINITY;
          }
      }
  }
}

// Full tiles take the copy with no mask arithmetic at all (the tiling-mask's point).
// kSplitLeftBound: partial tiles of calls without a left window bound take the copy that
// compares only the upper end (the sm90 forward; on the sm80 kernels the second copy moved
// ptxas's spills of the d = 64 units, so they keep one).
template <class T, bool kSoftcap, bool kSplitLeftBound = false>
__device__ __forceinline__ void scale_and_mask(float (&acc_s)[T::kMTiles][T::kNTilesS][4], const ForwardParams& p,
                                               bool masked, int q_row0, int k0, int len_k, int diagonal,
                                               int window_left, int window_right, int lane) {
  if (masked) {
    if (!kSplitLeftBound || window_left >= 0) {
      scale_and_mask_tile<T, kSoftcap, true, true>(acc_s, p, q_row0, k0, len_k, diagonal, window_left, window_right,
                                                   lane);
    } else {
      scale_and_mask_tile<T, kSoftcap, true, false>(acc_s, p, q_row0, k0, len_k, diagonal, window_left, window_right,
                                                    lane);
    }
  } else {
    scale_and_mask_tile<T, kSoftcap, false>(acc_s, p, q_row0, k0, len_k, diagonal, window_left, window_right, lane);
  }
}

}  // namespace fastattn::cuda
