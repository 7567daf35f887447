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

#include <array>
#include <cstdint>
#include <utility>

#include "cpu/simd.hpp"
#include "cpu/tile_gemm.hpp"

namespace fastattn::cpu::gemm {
namespace pairs_detail {

template <class V, bool kNative, int MR, int NV, Layout AL, bool kPartial>
void micro_tile(std::int64_t K2, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                float* c, std::int64_t ldc, bool accumulate, float scale, int last_lanes) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  vec acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (!accumulate) {
        acc[i][v] = V::zero();
      } else if (kPartial && v == NV - 1) {
        acc[i][v] = V::load_partial(c + i * ldc + v * W, last_lanes);
      } else {
        acc[i][v] = V::load(c + i * ldc + v * W);
      }
    }
  }
#pragma GCC unroll 2
  for (std::int64_t k = 0; k < K2; ++k) {
    vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = (kPartial && v == NV - 1) ? V::load_partial(b + v * W, last_lanes) : V::load(b + v * W);
    }
    b += ldb;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const vec ai = V::broadcast(AL == Layout::row_major ? a + i * lda + k : a + k * lda + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = simd::dot_pairs<V, kNative>(acc[i][v], ai, bv[v]);
    }
  }
  const vec s = V::set1(scale);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const vec out = accumulate ? acc[i][v] : V::mul(acc[i][v], s);
      if (kPartial && v == NV - 1) {
        V::store_partial(c + i * ldc + v * W, out, last_lanes);
      } else {
        V::store(c + i * ldc + v * W, out);
      }
    }
  }
}

using MicroTileFn = void (*)(std::int64_t, const float*, std::int64_t, const float*, std::int64_t, float*,
                             std::int64_t, bool, float, int);

template <class V, bool kNative, int NV, Layout AL, bool kPartial, std::size_t... R>
constexpr std::array<MicroTileFn, sizeof...(R)> row_table(std::index_sequence<R...>) {
  return {&micro_tile<V, kNative, static_cast<int>(R) + 1, NV, AL, kPartial>...};
}

template <class V, bool kNative, Layout AL, bool kPartial, std::size_t... N>
constexpr auto vector_table(std::index_sequence<N...>) {
  using Rows = std::make_index_sequence<V::kGemmRows>;
  return std::array<std::array<MicroTileFn, V::kGemmRows>, sizeof...(N)>{
      row_table<V, kNative, static_cast<int>(N) + 1, AL, kPartial>(Rows{})...};
}

// The micro-tile for `rows` in [1, kGemmRows] rows and nv in [1, kGemmVectors] vectors.
template <class V, bool kNative, Layout AL>
MicroTileFn tile_for(int rows, int nv, bool partial) {
  using Vectors = std::make_index_sequence<V::kGemmVectors>;
  static constexpr auto full = vector_table<V, kNative, AL, false>(Vectors{});
  static constexpr auto masked = vector_table<V, kNative, AL, true>(Vectors{});
  const auto& table = partial ? masked : full;
  return table[static_cast<std::size_t>(nv - 1)][static_cast<std::size_t>(rows - 1)];
}

template <class V, bool kNative, Layout AL>
void tile_gemm_impl(std::int64_t M, std::int64_t N, std::int64_t K2, const float* a, std::int64_t lda,
                    const PanelsB& b, float* c, std::int64_t ldc, bool accumulate, float scale) {
  constexpr int MR = V::kGemmRows;
  constexpr int NV = V::kGemmVectors;
  constexpr int W = V::kWidth;
  constexpr int P = NV * W;
  const std::int64_t a_row_step = AL == Layout::row_major ? lda : 1;
  // Panels outer, row blocks inner: one B panel is reused from L1 by every row block.
  for (std::int64_t j0 = 0; j0 < N; j0 += P) {
    const float* panel = b.data + (j0 / P) * b.panel_stride;
    const std::int64_t width = N - j0 < P ? N - j0 : P;
    const int nv = static_cast<int>((width + W - 1) / W);
    const int last_lanes = static_cast<int>(width - (nv - 1) * W);
    const bool partial = last_lanes != W;
    std::int64_t i0 = 0;
    if (nv == NV && !partial) {
      for (; i0 + MR <= M; i0 += MR) {
        micro_tile<V, kNative, MR, NV, AL, false>(K2, a + i0 * a_row_step, lda, panel, b.row_stride,
                                                  c + i0 * ldc + j0, ldc, accumulate, scale, W);
      }
    }
    for (; i0 < M; i0 += MR) {
      const int rows = static_cast<int>(M - i0 < MR ? M - i0 : MR);
      tile_for<V, kNative, AL>(rows, nv, partial)(K2, a + i0 * a_row_step, lda, panel, b.row_stride,
                                                  c + i0 * ldc + j0, ldc, accumulate, scale, last_lanes);
    }
  }
}

}  // namespace pairs_detail

// C (M x N, row-major, leading dim ldc) = scale * A B, or += A B; K2 pairs of k; see the file
// comment for the operands.
template <class V, bool kNative>
inline void tile_gemm_pairs(std::int64_t M, std::int64_t N, std::int64_t K2, const MatrixA& a, const PanelsB& b,
                            float* c, std::int64_t ldc, bool accumulate, float scale = 1.0f) {
  if (M <= 0 || N <= 0) return;
  if (a.layout == Layout::row_major) {
    pairs_detail::tile_gemm_impl<V, kNative, Layout::row_major>(M, N, K2, a.data, a.ld, b, c, ldc, accumulate,
                                                                scale);
  } else {
    pairs_detail::tile_gemm_impl<V, kNative, Layout::col_major>(M, N, K2, a.data, a.ld, b, c, ldc, accumulate,
                                                                scale);
  }
}

}  // namespace fastattn::cpu::gemm
