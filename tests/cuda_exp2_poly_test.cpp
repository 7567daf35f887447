// cuda_exp2_poly_test.cpp — the FMA-pipe 2^x of the sm90 forward's softmax
// (src/cuda/common/exp2_poly.hpp), on the CPU (label `cpu`). The host path is the device's
// arithmetic (fused multiply-adds, floor exact in both), so its error bound, its zeros and its
// NaN hold for the kernels that use it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "cuda/common/exp2_poly.hpp"

namespace fastattn::testing {
namespace {

using cuda::exp2_poly;

template <int kDegree>
double max_relative_error(float lo, float hi, int points) {
  double worst = 0.0;
  for (int i = 0; i <= points; ++i) {
    const float x = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(points);
    const double want = std::exp2(static_cast<double>(x));
    if (want < 0x1p-126) continue;  // flushed, checked below
    worst = std::max(worst, std::fabs(static_cast<double>(exp2_poly<kDegree>(x)) / want - 1.0));
  }
  return worst;
}

// The bounds are the polynomials' minimax errors (8.56e-5, 2.90e-6) plus float32 rounding.
TEST(CudaExp2Poly, RelativeErrorWithinTheBound) {
  EXPECT_LT(max_relative_error<3>(-126.0f, 0.0f, 2000000), 8.8e-5);
  EXPECT_LT(max_relative_error<4>(-126.0f, 0.0f, 2000000), 3.2e-6);
  // One unit below and above an integer, where j changes.
  EXPECT_LT(max_relative_error<3>(-3.001f, -2.999f, 20000), 8.8e-5);
  EXPECT_LT(max_relative_error<4>(-3.001f, -2.999f, 20000), 3.2e-6);
  // Rounding in the FFMA that subtracts the row max can leave a score just above 0.
  EXPECT_LT(max_relative_error<3>(0.0f, 1.0e-3f, 1000), 8.8e-5);
  std::mt19937 rng(20261205);
  std::uniform_real_distribution<float> uniform(-30.0f, 0.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = uniform(rng);
    const double want = std::exp2(static_cast<double>(x));
    ASSERT_LT(std::fabs(exp2_poly<3>(x) / want - 1.0), 8.8e-5) << "x = " << x;
    ASSERT_LT(std::fabs(exp2_poly<4>(x) / want - 1.0), 3.2e-6) << "x = " << x;
  }
}

TEST(CudaExp2Poly, IntegersAreExact) {
  for (int k = 0; k <= 126; ++k) {
    EXPECT_EQ(exp2_poly<3>(static_cast<float>(-k)), std::ldexp(1.0f, -k)) << "x = -" << k;
    EXPECT_EQ(exp2_poly<4>(static_cast<float>(-k)), std::ldexp(1.0f, -k)) << "x = -" << k;
  }
}

// Masked scores are -inf: their weight must be exactly 0, and everything below 2^-126 is
// flushed to +0, as the MUFU path's ex2.approx.ftz does.
TEST(CudaExp2Poly, MaskedAndTinyGiveZero) {
  for (float x : {-std::numeric_limits<float>::infinity(), -1.0e30f, -1000.0f, -127.5f, -127.0f, -126.5f,
                  -126.0001f}) {
    EXPECT_EQ(exp2_poly<3>(x), 0.0f) << "x = " << x;
    EXPECT_FALSE(std::signbit(exp2_poly<3>(x))) << "x = " << x;
    EXPECT_EQ(exp2_poly<4>(x), 0.0f) << "x = " << x;
  }
  EXPECT_EQ(exp2_poly<3>(-126.0f), 0x1p-126f);
}

TEST(CudaExp2Poly, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(exp2_poly<3>(nan)));
  EXPECT_TRUE(std::isnan(exp2_poly<4>(nan)));
  EXPECT_TRUE(std::isnan(exp2_poly<3>(-nan)));
}

// Softmax weights keep the order of their scores.
TEST(CudaExp2Poly, Monotonic) {
  for (int degree : {3, 4}) {
    float previous = 0.0f;
    for (int i = 0; i <= 1000000; ++i) {
      const float x = -20.0f + 20.0f * static_cast<float>(i) / 1000000.0f;
      const float y = degree == 3 ? exp2_poly<3>(x) : exp2_poly<4>(x);
      ASSERT_GE(y, previous) << "degree " << degree << ", x = " << x;
      previous = y;
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
