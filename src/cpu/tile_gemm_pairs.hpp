// tile_gemm_pairs.hpp — register-blocked tile products on bf16 pairs (AVX-512 BF16's
// vdpbf16ps), f32 accumulation, for the bf16 CPU forward kernel.
//
//   C (M x N)  = scale * A (M x 2K2) * B (2K2 x N)     (accumulate = false)
//   C (M x N) +=         A (M x 2K2) * B (2K2 x N)     (accumulate = true, scale unused)
//
// Operands hold bf16 *pairs*: one 32-bit word per (row, k pair), the element of the even k in
// its low half, stored in float-typed buffers as bit patterns (never used as floats):
//   A (M x K2 words): word (i, p) at a[i * ld + p] (Layout::row_major) or a[p * ld + i]
//                     (Layout::col_major); it is broadcast to every lane.
//   B (K2 x N words): column panels of panel_width<V>() words, like tile_gemm.hpp's PanelsB:
//                     word (p, j) at data[(j / kPanel) * panel_stride + p * row_stride + j % kPanel]
// Each vdpbf16ps lane adds a_lo * b_lo + a_hi * b_hi, i.e. two k steps at once: twice the f32
// FMA's rate. kNative = false runs the same kernel with two FMAs on the widened halves
// (simd::dot_pairs), so the pair layouts can be tested on CPUs without AVX-512 BF16.
// Odd K: the caller pads the last pair's high half with 0 in A or B.
#pragma once

#include <cstdint>

#include "cpu/simd.hpp"
#include "cpu/tile_gemm.hpp"

namespace fastattn::cpu::gemm {
namespace pairs_detail {

// tile_gemm.hpp's micro-tile step for bf16 pairs: one vdpbf16ps (or its FMA emulation) per
// pair of k, and the scale applied as the tile is stored.
template <bool kNative>
struct PairStep {
  static constexpr bool kScaledStore = true;
  template <class V>
  static typename V::vec madd(typename V::vec acc, typename V::vec a, typename V::vec b) {
    return simd::dot_pairs<V, kNative>(acc, a, b);
  }
};

}  // namespace pairs_detail

// C (M x N, row-major, leading dim ldc) = scale * A B, or += A B; K2 pairs of k; see the file
// comment for the operands.
template <class V, bool kNative>
inline void tile_gemm_pairs(std::int64_t M, std::int64_t N, std::int64_t K2, const MatrixA& a, const PanelsB& b,
                            float* c, std::int64_t ldc, bool accumulate, float scale = 1.0f) {
  if (M <= 0 || N <= 0) return;
  if (a.layout == Layout::row_major) {
    detail::tile_gemm_impl<V, pairs_detail::PairStep<kNative>, Layout::row_major>(M, N, K2, a.data, a.ld, b, c, ldc,
                                                                                  accumulate, scale);
  } else {
    detail::tile_gemm_impl<V, pairs_detail::PairStep<kNative>, Layout::col_major>(M, N, K2, a.data, a.ld, b, c, ldc,
                                                                                  accumulate, scale);
  }
}

}  // namespace fastattn::cpu::gemm
