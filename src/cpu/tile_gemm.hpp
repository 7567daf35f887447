// tile_gemm.hpp — register-blocked f32 tile products for the CPU attention kernels.
//
//   C (M x N)  = A (M x K) * B (K x N)     (accumulate = false)
//   C (M x N) += A (M x K) * B (K x N)     (accumulate = true)
//
// Usage (V = simd::Avx2 or simd::Avx512, see simd.hpp):
//
//   constexpr int kPanel = gemm::panel_width<V>();       // columns per B panel (16 / 32)
//   // B as a packed panel copy of K^T, where kt is (n x d) row-major with leading dim ld:
//   gemm::pack_transposed<V>(kt, ld, n, d, n_padded, packed);   // packed: d x n_padded panels
//   gemm::tile_gemm<V>(M, n, d, gemm::MatrixA{a, lda, gemm::Layout::row_major},
//                      gemm::packed_b<V>(packed, d), c, ldc, /*accumulate=*/false);
//   // B as a plain row-major (K x N) matrix (e.g. a V tile), no copy needed:
//   gemm::tile_gemm<V>(M, N, K, a, gemm::row_major_b<V>(v, ldv), c, ldc, true);
//
// A is read by broadcasting single elements, so it can be used in either orientation without
// a copy: Layout::row_major reads A(i, k) at a[i * ld + k], Layout::col_major at a[k * ld + i]
// (the latter multiplies by the transpose of a row-major matrix, e.g. P from a stored S^T).
// B is read a row of a column panel at a time: element (k, j) lives at
//   data[(j / kPanel) * panel_stride + k * row_stride + j % kPanel].
// The micro-kernel keeps a kGemmRows x kPanel block of C in registers for the whole K loop
// (AVX2: 6 x 16, 12 accumulators; AVX-512: 12 x 32, 24 accumulators). Any M, N, K >= 0 work;
// ragged edges use narrower instantiations and masked loads/stores (never reading past N).
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "cpu/simd.hpp"

namespace fastattn::cpu::gemm {

enum class Layout { row_major, col_major };

// A (M x K): element (i, k) at data[i * ld + k] (row_major) or data[k * ld + i] (col_major).
struct MatrixA {
  const float* data;
  std::int64_t ld;
  Layout layout;
};

// B (K x N) as column panels of panel_width<V>() columns (see the file comment).
struct PanelsB {
  const float* data;
  std::int64_t row_stride;
  std::int64_t panel_stride;
};

template <class V>
constexpr int panel_width() {
  return V::kGemmVectors * V::kWidth;
}

// A row-major B with leading dimension ld (columns j..j+kPanel of row k are contiguous).
template <class V>
constexpr PanelsB row_major_b(const float* data, std::int64_t ld) {
  return PanelsB{data, ld, panel_width<V>()};
}
// A B written by pack_panels / pack_transposed with K rows.
template <class V>
constexpr PanelsB packed_b(const float* data, std::int64_t k_rows) {
  return PanelsB{data, panel_width<V>(), k_rows * panel_width<V>()};
}

// dst = panels of src (K x N, row-major, leading dim ld), columns padded with zeros up to
// n_padded (a multiple of panel_width). dst holds K * n_padded floats.
template <class V>
inline void pack_panels(const float* src, std::int64_t ld, std::int64_t K, std::int64_t N,
                        std::int64_t n_padded, float* dst) {
  constexpr int P = panel_width<V>();
  for (std::int64_t j0 = 0; j0 < n_padded; j0 += P) {
    float* panel = dst + (j0 / P) * K * P;
    const std::int64_t width = N - j0 < P ? (N - j0 > 0 ? N - j0 : 0) : P;
    for (std::int64_t k = 0; k < K; ++k) {
      const float* row = src + k * ld + j0;
      float* out = panel + k * P;
      std::int64_t j = 0;
      for (; j < width; ++j) out[j] = row[j];
      for (; j < P; ++j) out[j] = 0.0f;
    }
  }
}

// dst = panels of src^T, where src is (rows x cols) row-major with leading dim ld: B = src^T is
// (cols x rows), i.e. K = cols and N = rows, padded with zero columns up to rows_padded (a
// multiple of panel_width). dst holds cols * rows_padded floats; use packed_b<V>(dst, cols).
template <class V>
inline void pack_transposed(const float* src, std::int64_t ld, std::int64_t rows,
                            std::int64_t cols, std::int64_t rows_padded, float* dst) {
  constexpr int P = panel_width<V>();
  for (std::int64_t r0 = 0; r0 < rows_padded; r0 += P) {
    float* panel = dst + (r0 / P) * cols * P;
    const std::int64_t height = rows - r0 < P ? (rows - r0 > 0 ? rows - r0 : 0) : P;
    // Write each panel row (fixed column c of src) contiguously; the P source rows being read
    // stay in L1 across consecutive c.
    for (std::int64_t c = 0; c < cols; ++c) {
      float* out = panel + c * P;
      std::int64_t r = 0;
      for (; r < height; ++r) out[r] = src[(r0 + r) * ld + c];
      for (; r < P; ++r) out[r] = 0.0f;
    }
  }
}

namespace detail {

// How a micro-tile multiplies, per k step: FmaStep, one f32 FMA (this file's tile_gemm); the
// bf16-pair step (two k at once, vdpbf16ps) is in tile_gemm_pairs.hpp. kScaledStore: C is
// written as scale * (A B) when not accumulating.
struct FmaStep {
  static constexpr bool kScaledStore = false;
  template <class V>
  static typename V::vec madd(typename V::vec acc, typename V::vec a, typename V::vec b) {
    return V::fmadd(a, b, acc);
  }
};

// One register tile: C (MR x NV vectors) (+)= A (MR x K) * B (K x NV vectors). With kPartial
// the last vector covers only `last_lanes` columns (masked loads and stores).
template <class V, class Step, int MR, int NV, Layout AL, bool kPartial>
void micro_tile(std::int64_t K, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float* c,
                std::int64_t ldc, bool accumulate, float scale, int last_lanes) {
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
  for (std::int64_t k = 0; k < K; ++k) {
    vec bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      bv[v] = (kPartial && v == NV - 1) ? V::load_partial(b + v * W, last_lanes)
                                        : V::load(b + v * W);
    }
    b += ldb;
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const vec ai = V::broadcast(AL == Layout::row_major ? a + i * lda + k : a + k * lda + i);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = Step::template madd<V>(acc[i][v], ai, bv[v]);
    }
  }
  [[maybe_unused]] const vec s = V::set1(scale);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      vec out = acc[i][v];
      if constexpr (Step::kScaledStore) out = accumulate ? out : V::mul(out, s);
      if (kPartial && v == NV - 1) {
        V::store_partial(c + i * ldc + v * W, out, last_lanes);
      } else {
        V::store(c + i * ldc + v * W, out);
      }
    }
  }
}

using MicroTileFn = void (*)(std::int64_t, const float*, std::int64_t, const float*, std::int64_t,
                             float*, std::int64_t, bool, float, int);

// table[rows - 1] for rows = 1..kGemmRows, at a fixed vector count and partial flag.
template <class V, class Step, int NV, Layout AL, bool kPartial, std::size_t... R>
constexpr std::array<MicroTileFn, sizeof...(R)> row_table(std::index_sequence<R...>) {
  return {&micro_tile<V, Step, static_cast<int>(R) + 1, NV, AL, kPartial>...};
}

template <class V, class Step, Layout AL, bool kPartial, std::size_t... N>
constexpr auto vector_table(std::index_sequence<N...>) {
  using Rows = std::make_index_sequence<V::kGemmRows>;
  return std::array<std::array<MicroTileFn, V::kGemmRows>, sizeof...(N)>{
      row_table<V, Step, static_cast<int>(N) + 1, AL, kPartial>(Rows{})...};
}

// The micro-tile for a ragged block: rows in [1, kGemmRows], nv in [1, kGemmVectors].
template <class V, class Step, Layout AL>
MicroTileFn ragged_tile(int rows, int nv, bool partial) {
  using Vectors = std::make_index_sequence<V::kGemmVectors>;
  static constexpr auto full = vector_table<V, Step, AL, false>(Vectors{});
  static constexpr auto masked = vector_table<V, Step, AL, true>(Vectors{});
  const auto& table = partial ? masked : full;
  return table[static_cast<std::size_t>(nv - 1)][static_cast<std::size_t>(rows - 1)];
}

// C (M x N) (+)= A (M x K) B (K x N), K in the Step's k units (f32: elements; pairs: pairs).
template <class V, class Step, Layout AL>
void tile_gemm_impl(std::int64_t M, std::int64_t N, std::int64_t K, const float* a,
                    std::int64_t lda, const PanelsB& b, float* c, std::int64_t ldc,
                    bool accumulate, float scale) {
  constexpr int MR = V::kGemmRows;
  constexpr int NV = V::kGemmVectors;
  constexpr int W = V::kWidth;
  constexpr int P = NV * W;
  const std::int64_t a_row_step = AL == Layout::row_major ? lda : 1;  // A offset per row of C
  // Panels outer, row blocks inner: one B panel (K x P) is reused from L1 by every row block.
  for (std::int64_t j0 = 0; j0 < N; j0 += P) {
    const float* panel = b.data + (j0 / P) * b.panel_stride;
    const std::int64_t width = N - j0 < P ? N - j0 : P;
    float* c_panel = c + j0;
    if (width == P) {
      std::int64_t i0 = 0;
      for (; i0 + MR <= M; i0 += MR) {
        micro_tile<V, Step, MR, NV, AL, false>(K, a + i0 * a_row_step, lda, panel, b.row_stride,
                                               c_panel + i0 * ldc, ldc, accumulate, scale, W);
      }
      if (i0 < M) {
        ragged_tile<V, Step, AL>(static_cast<int>(M - i0), NV, false)(
            K, a + i0 * a_row_step, lda, panel, b.row_stride, c_panel + i0 * ldc, ldc,
            accumulate, scale, W);
      }
    } else {
      const int nv = static_cast<int>((width + W - 1) / W);
      const int last_lanes = static_cast<int>(width - (nv - 1) * W);
      const bool partial = last_lanes != W;
      for (std::int64_t i0 = 0; i0 < M; i0 += MR) {
        const int rows = static_cast<int>(M - i0 < MR ? M - i0 : MR);
        ragged_tile<V, Step, AL>(rows, nv, partial)(K, a + i0 * a_row_step, lda, panel, b.row_stride,
                                                    c_panel + i0 * ldc, ldc, accumulate, scale, last_lanes);
      }
    }
  }
}

}  // namespace detail

// C (M x N, row-major, leading dim ldc) = or += A * B; see the file comment for the operands.
// With accumulate = false, C is only written (it may hold garbage or NaN beforehand).
template <class V>
inline void tile_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const MatrixA& a,
                      const PanelsB& b, float* c, std::int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  if (a.layout == Layout::row_major) {
    detail::tile_gemm_impl<V, detail::FmaStep, Layout::row_major>(M, N, K, a.data, a.ld, b, c, ldc, accumulate,
                                                                   1.0f);
  } else {
    detail::tile_gemm_impl<V, detail::FmaStep, Layout::col_major>(M, N, K, a.data, a.ld, b, c, ldc, accumulate,
                                                                   1.0f);
  }
}

}  // namespace fastattn::cpu::gemm
