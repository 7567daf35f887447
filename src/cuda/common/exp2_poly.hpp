// exp2_poly.hpp — 2^x on the FMA units (no MUFU), host and device.
//
// Why: at head_dim 64 the sm90 forward's softmax needs as many MUFU cycles as its GEMMs need
// tensor-core cycles (a 64 x 128 tile: 8192 exponentials at 16 a clock per SM = 512 clocks;
// Q K^T plus P V = 2 x 64 x 128 x 64 multiply-adds at 2048 a clock = 512 clocks), so the
// exponentials are half of each consumer warpgroup's critical path. Computing a fixed share of
// them here moves that share to the FMA pipe, which has room (FlashAttention-4 does the same on
// Blackwell: flash_attn/cute/utils.py, ex2_emulation; the split: Cody-Waite, then a minimax
// polynomial).
//
// x = j + f with j = floor(x) and f = x - j in [0, 1]: 2^x = 2^j * 2^f, 2^f from a polynomial
// with p(0) = 1 exactly, 2^j built as a float from j's bits. (f is 1.0f, not just below, when
// x lies within 2^-25 below an integer, e.g. a score a rounding step under its row max: the
// result is then 2^(j+1) * p(1) / 2, inside the same error bound.) On the device, floor comes
// from one add rounded toward -inf of 1.5 * 2^23 (j then sits in the low mantissa bits of the
// sum, and the sum minus 1.5 * 2^23 is j exactly). In SASS: FMNMX.NAN (clamp) and LEA (2^j's
// bits) on the ALU pipe; FADD.RM, two FADD, the polynomial's FFMAs (3 at degree 3, 4 at degree
// 4) and one FMUL on the FMA pipe, against one MUFU.EX2.
// Inputs are clamped to -127 first (max.NaN keeps NaN): j = -127 makes
// 2^j's bits 0, so every x <= -127 (and -inf, the masked scores) gives +0 exactly, and results
// below 2^-126 are flushed to 0, as exp2_ftz (fast_exp.cuh) flushes them. Meant for x <= 0
// (scores minus their row max); valid up to x < 128.
//
// Relative error against 2^x (float32 Horner, checked on the CPU by
// tests/cuda_exp2_poly_test.cpp): degree 3 8.6e-5, degree 4 3.0e-6 (rounding P to bf16, 8
// significant bits, costs up to 2^-8 = 3.9e-3; to f16, 11 bits, 2^-11 = 4.9e-4).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/mask.hpp"  // FASTATTN_HD

namespace fastattn::cuda {

// Minimax coefficients of 2^f on [0, 1) for relative error, constant term 1 (Lawson's
// iteration over 4000 points, rounded to float): c(degree, k) multiplies f^k, k >= 1.
FASTATTN_HD constexpr float exp2_poly_coefficient(int degree, int k) {
  constexpr float kDegree3[3] = {0.6951168179512024f, 0.22764481604099274f, 0.07706719636917114f};
  constexpr float kDegree4[4] = {0.6930448412895203f, 0.2412802129983902f, 0.052242446690797806f,
                                 0.013426701538264751f};
  return degree == 3 ? kDegree3[k - 1] : kDegree4[k - 1];
}

namespace exp2_poly_detail {

FASTATTN_HD float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

FASTATTN_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

FASTATTN_HD std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

}  // namespace exp2_poly_detail

template <int kDegree>
FASTATTN_HD float exp2_poly(float x) {
  static_assert(kDegree == 3 || kDegree == 4, "coefficients for degree 3 and 4");
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: the sum's ulp is 1
  float shifted;  // floor(x) + 1.5 * 2^23, exact
#if defined(__CUDA_ARCH__)
  asm("max.NaN.f32 %0, %0, 0fC2FE0000;\n" : "+f"(x));  // max(x, -127), NaN stays NaN
  asm("add.rm.f32 %0, %1, %2;\n" : "=f"(shifted) : "f"(x), "f"(kRoundShift));
#else
  x = std::isnan(x) ? x : (x < -127.0f ? -127.0f : x);
  shifted = std::floor(x) + kRoundShift;
#endif
  const float j = shifted - kRoundShift;  // floor(x), exact
  const float f = x - j;                  // [0, 1] (see above)
  // Horner, fused multiply-adds on both sides (so host and device give the same bits); the
  // loop's 2 or 3 steps unroll (no pragma: the header is host code too).
  float p = exp2_poly_coefficient(kDegree, kDegree);
  for (int k = kDegree - 1; k >= 1; --k) p = exp2_poly_detail::fma(p, f, exp2_poly_coefficient(kDegree, k));
  p = exp2_poly_detail::fma(p, f, 1.0f);
  // 2^j: j's low bits (two's complement, mod 2^32) shifted into the exponent field, plus the
  // bias; j = -127 gives the bits of +0.
  const std::uint32_t scale_bits = (exp2_poly_detail::float_to_bits(shifted) << 23) + 0x3f800000u;
  return p * exp2_poly_detail::bits_to_float(scale_bits);
}

}  // namespace fastattn::cuda
