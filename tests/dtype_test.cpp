// dtype_test.cpp — the scalar conversions of src/common/dtype.hpp.
//
// f16: against the F16C instructions (compiled with -mf16c, entered only when the CPU has them),
//      exhaustively over the 65536 half patterns, over every midpoint between neighbouring
//      halves (the round-to-nearest-even ties) and its f32 neighbours, and over a stride-97 walk
//      of all 2^32 float patterns.
// bf16: against an independent rounding written with double arithmetic, over the same sets.
// NaN: the scalar code returns a NaN of the same sign (payloads may differ from the hardware's).
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/dtype.hpp"

namespace fastattn {
namespace {

float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

bool f16_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(std::uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

bool have_f16c() { return __builtin_cpu_supports("f16c") != 0; }

std::uint16_t hw_float_to_f16(float x) {
  return static_cast<std::uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}
float hw_f16_to_float(std::uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Checks float_to_f16(x) against the hardware; returns false (once reported) on a mismatch.
bool same_f16(float x) {
  const std::uint16_t hw = hw_float_to_f16(x), sw = float_to_f16(x);
  if (std::isnan(x)) {
    EXPECT_TRUE(f16_is_nan(sw) && (sw & 0x8000u) == ((to_bits(x) >> 16) & 0x8000u))
        << std::hex << "float bits 0x" << to_bits(x) << " -> 0x" << sw;
    return f16_is_nan(sw);
  }
  EXPECT_EQ(sw, hw) << std::hex << "float_to_f16(bits 0x" << to_bits(x) << " = " << x << ")";
  return sw == hw;
}

TEST(DType, F16ToFloatMatchesF16cForEveryPattern) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const std::uint16_t half = static_cast<std::uint16_t>(h);
    const float sw = f16_to_float(half), hw = hw_f16_to_float(half);
    if (f16_is_nan(half)) {
      ASSERT_TRUE(std::isnan(sw)) << std::hex << h;
      ASSERT_EQ(to_bits(sw) >> 31, h >> 15) << std::hex << h;
      // Same payload; the hardware also sets the quiet bit.
      ASSERT_EQ(to_bits(sw) | 0x00400000u, to_bits(hw)) << std::hex << h;
    } else {
      ASSERT_EQ(to_bits(sw), to_bits(hw)) << std::hex << "half 0x" << h;
    }
  }
}

TEST(DType, FloatToF16MatchesF16cOnHalvesAndTies) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const std::uint16_t half = static_cast<std::uint16_t>(h);
    if (f16_is_nan(half)) continue;
    const float x = f16_to_float(half);
    ASSERT_EQ(float_to_f16(x), half) << std::hex << "round trip of half 0x" << h;
    if ((h & 0x7fffu) >= 0x7c00u) continue;  // inf: no midpoint above
    // The midpoint between this half and the next one away from zero (exact in f32), and its
    // float neighbours on both sides.
    const float next = f16_to_float(static_cast<std::uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(x) + next) / 2.0);
    const std::uint32_t mb = to_bits(mid);
    for (std::uint32_t b : {mb - 1, mb, mb + 1})
      if (!same_f16(from_bits(b))) return;
  }
}

TEST(DType, FloatToF16MatchesF16cOnAFloatWalk) {
  if (!have_f16c()) GTEST_SKIP() << "CPU without F16C";
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += 97)
    if (!same_f16(from_bits(static_cast<std::uint32_t>(b)))) return;
}

// Round to nearest even onto bf16 with double arithmetic, written independently of dtype.hpp.
std::uint16_t bf16_by_doubles(float x) {
  const std::uint32_t bits = to_bits(x);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint16_t toward_zero = static_cast<std::uint16_t>(bits >> 16);  // truncated
  if ((bits & 0xffffu) == 0) return toward_zero;                             // exact
  const std::uint16_t away = static_cast<std::uint16_t>(toward_zero + 1);    // next magnitude
  const double lo = std::fabs(static_cast<double>(bf16_to_float(toward_zero)));
  const double hi = (away & 0x7fffu) == 0x7f80u
                        ? std::ldexp(1.0, 128)  // overflow: the rounding boundary of max bf16
                        : std::fabs(static_cast<double>(bf16_to_float(away)));
  const double ax = std::fabs(static_cast<double>(x));
  const double below = ax - lo, above = hi - ax;
  std::uint16_t r;
  if (below < above) r = toward_zero;
  else if (above < below) r = away;
  else r = (toward_zero & 1u) ? away : toward_zero;
  return static_cast<std::uint16_t>((r & 0x7fffu) | sign);
}

bool same_bf16(float x) {
  const std::uint16_t sw = float_to_bf16(x);
  if (std::isnan(x)) {
    EXPECT_TRUE(bf16_is_nan(sw) && (sw & 0x8000u) == ((to_bits(x) >> 16) & 0x8000u))
        << std::hex << "float bits 0x" << to_bits(x);
    return bf16_is_nan(sw);
  }
  const std::uint16_t want = bf16_by_doubles(x);
  EXPECT_EQ(sw, want) << std::hex << "float_to_bf16(bits 0x" << to_bits(x) << " = " << x << ")";
  return sw == want;
}

TEST(DType, Bf16RoundTripsAndTies) {
  for (std::uint32_t h = 0; h <= 0xffffu; ++h) {
    const std::uint16_t b = static_cast<std::uint16_t>(h);
    const float x = bf16_to_float(b);
    ASSERT_EQ(to_bits(x), h << 16);
    if (bf16_is_nan(b)) {
      ASSERT_TRUE(bf16_is_nan(float_to_bf16(x))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(float_to_bf16(x), b) << std::hex << "round trip of bf16 0x" << h;
    const std::uint32_t mid = (h << 16) | 0x8000u;  // halfway to the next bf16 away from zero
    for (std::uint32_t m : {mid - 1, mid, mid + 1})
      if (!same_bf16(from_bits(m))) return;
  }
}

TEST(DType, FloatToBf16OnAFloatWalk) {
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += 97)
    if (!same_bf16(from_bits(static_cast<std::uint32_t>(b)))) return;
}

}  // namespace
}  // namespace fastattn
