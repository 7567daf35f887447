// row_softmax.cpp — an exp the compiler vectorises, and the loops around it.
#include "row_softmax.hpp"

#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FASTATTN_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FASTATTN_ROW_CLONES
#endif

namespace fastattn::bench {

namespace {

// exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2), e^r from
// Cephes' degree-6 polynomial, 2^n from the exponent bits. Arguments below -87 are clamped
// (e^-87 ~ 1.6e-38: nothing next to the row maximum's 1). Branch-free, so it vectorises; the
// clamp's comparison is if-converted because this file is built with -fno-trapping-math.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // 2^-126 is the smallest normal scale
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return er * two_n;
}

}  // namespace

FASTATTN_ROW_CLONES
float row_max(const float* s, std::int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (std::int64_t j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

FASTATTN_ROW_CLONES
float exp_shifted_sum(float* s, std::int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = exp_nonpositive(s[j] - shift);
    sum += s[j];
  }
  return sum;
}

FASTATTN_ROW_CLONES
void scale_row(float* s, std::int64_t n, float factor) {
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) s[j] *= factor;
}

}  // namespace fastattn::bench
