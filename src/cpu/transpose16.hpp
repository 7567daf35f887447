// transpose16.hpp — the 16 x 16 transpose of 32-bit words in zmm registers that the AMX
// kernels use to stage operands (bf16 pairs are 32-bit words: V^T and Q^T in the forward,
// K/V pair transposes and dK/dV in the backward). Bits are moved, never converted.
#pragma once

#include <cstdint>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround

// Per-ISA inline namespace (simd.hpp): TUs built with other flags keep their own copies.
namespace fastattn::cpu {
inline namespace FASTATTN_SIMD_NAMESPACE {

#if defined(__AVX512BW__)
// r[i] = row i of a 16 x 16 matrix of 32-bit words -> r[c] = column c.
inline void transpose_words_16x16(__m512i* r) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // u[4g + m]: lane L holds column 4L + m of rows 4g .. 4g + 3.
  for (int g = 0; g < 4; ++g) {
    u[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  // v[m] (rows 0-7) and v[8 + m] (rows 8-15): lanes (col m rows 0-3, col m + 8 rows 0-3,
  // col m rows 4-7, col m + 8 rows 4-7) for m < 4; m >= 4: columns m - 4 + 4, m - 4 + 12.
  __m512i v[16];
  for (int m = 0; m < 4; ++m) {
    v[m] = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x88);
    v[4 + m] = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xdd);
    v[8 + m] = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x88);
    v[12 + m] = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xdd);
  }
  for (int m = 0; m < 8; ++m) {
    r[m] = _mm512_shuffle_i32x4(v[m], v[8 + m], 0x88);
    r[m + 8] = _mm512_shuffle_i32x4(v[m], v[8 + m], 0xdd);
  }
}
#endif

#if defined(__AVX512F__)
// dst (16, 16) = src (16, 16)^T, 32-bit elements, rows lds / ldd elements apart.
inline void transpose16(const float* src, std::int64_t lds, float* dst, std::int64_t ldd) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src + i * lds));
  transpose_words_16x16(r);
  for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + i * ldd, _mm512_castsi512_ps(r[i]));
}
#endif

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu
