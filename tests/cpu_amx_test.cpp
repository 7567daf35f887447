// cpu_amx_test.cpp — the AMX tile layer (src/cpu/amx.hpp): gemm_bf16 native (skipped without
// AMX) and emulated against a float64 reference, native against emulated, and FASTATTN_CPU_AMX.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cpu/amx.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using cpu::amx::AmxMode;
using fastattn::testing::ScopedEnv;

struct GemmShape {
  std::int64_t m, n, k;
  std::int64_t pad;  // extra elements per row of A, B and C (strides wider than the block)
  bool accumulate;
};

std::string shape_name(const ::testing::TestParamInfo<GemmShape>& info) {
  const GemmShape& s = info.param;
  return "m" + std::to_string(s.m) + "n" + std::to_string(s.n) + "k" + std::to_string(s.k) + "pad" +
         std::to_string(s.pad) + (s.accumulate ? "acc" : "");
}

// One random problem: A (m, k) bf16, B (k, n) bf16 -> VNNI pairs, C0 (m, n) f32; the float64
// result and the sum of |a b| per element (the error bound's scale).
struct GemmCase {
  GemmShape s;
  std::int64_t lda, ldb, ldc;
  std::vector<std::uint16_t> a, b_rows;
  std::vector<std::uint32_t> b;
  std::vector<float> c0;
  std::vector<double> ref, mag;

  explicit GemmCase(const GemmShape& shape, unsigned seed) : s(shape) {
    lda = s.k + s.pad;
    ldb = s.n + s.pad;
    ldc = s.n + s.pad;
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    a.assign(static_cast<std::size_t>(s.m * lda), 0);
    b_rows.assign(static_cast<std::size_t>(s.k * s.n), 0);
    for (auto& x : a) x = float_to_bf16(dist(rng));
    for (auto& x : b_rows) x = float_to_bf16(dist(rng));
    b.assign(static_cast<std::size_t>(s.k / 2 * ldb), 0xdeadbeefu);
    cpu::amx::pack_vnni(s.k, s.n, b_rows.data(), s.n, b.data(), ldb);
    c0.assign(static_cast<std::size_t>(s.m * ldc), 0.0f);
    for (auto& x : c0) x = s.accumulate ? dist(rng) : std::nanf("");  // not read when !accumulate
    ref.assign(static_cast<std::size_t>(s.m * s.n), 0.0);
    mag.assign(ref.size(), 0.0);
    for (std::int64_t i = 0; i < s.m; ++i) {
      for (std::int64_t j = 0; j < s.n; ++j) {
        double sum = s.accumulate ? c0[static_cast<std::size_t>(i * ldc + j)] : 0.0, m = std::fabs(sum);
        for (std::int64_t p = 0; p < s.k; ++p) {
          const double t = static_cast<double>(bf16_to_float(a[static_cast<std::size_t>(i * lda + p)])) *
                           bf16_to_float(b_rows[static_cast<std::size_t>(p * s.n + j)]);
          sum += t;
          m += std::fabs(t);
        }
        ref[static_cast<std::size_t>(i * s.n + j)] = sum;
        mag[static_cast<std::size_t>(i * s.n + j)] = m;
      }
    }
  }

  // Error bound of an f32 accumulation of k exact products into C: one rounding per add.
  double bound(std::int64_t i, std::int64_t j) const {
    return static_cast<double>(s.k + 1) * std::ldexp(1.0, -24) * mag[static_cast<std::size_t>(i * s.n + j)];
  }

  template <class Run>
  std::vector<float> run(Run gemm) const {
    std::vector<float> c = c0;
    gemm(s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), ldc, s.accumulate);
    return c;
  }

  void expect_matches_reference(const std::vector<float>& c, const char* what) const {
    int bad = 0;
    for (std::int64_t i = 0; i < s.m; ++i) {
      for (std::int64_t j = 0; j < s.n; ++j) {
        const double got = c[static_cast<std::size_t>(i * ldc + j)];
        const double want = ref[static_cast<std::size_t>(i * s.n + j)];
        if (!(std::fabs(got - want) <= bound(i, j)) && ++bad <= 5) {
          ADD_FAILURE() << what << " C(" << i << ", " << j << ") = " << got << ", float64 " << want
                        << ", bound " << bound(i, j);
        }
      }
      // Padding columns of C are never written.
      for (std::int64_t j = s.n; j < ldc; ++j) {
        const float before = c0[static_cast<std::size_t>(i * ldc + j)], after = c[static_cast<std::size_t>(i * ldc + j)];
        EXPECT_TRUE(std::memcmp(&before, &after, 4) == 0) << what << " wrote padding column " << j;
      }
    }
    EXPECT_EQ(bad, 0) << what;
  }
};

class AmxGemm : public ::testing::TestWithParam<GemmShape> {};

TEST_P(AmxGemm, EmulatedMatchesFloat64) {
  const GemmCase c(GetParam(), 1234);
  c.expect_matches_reference(c.run(cpu::amx::gemm_bf16_emulated), "emulated");
}

TEST_P(AmxGemm, NativeMatchesFloat64AndEmulated) {
  if (!cpu::amx::amx_available()) GTEST_SKIP() << "no AMX: " << cpu::amx::amx_unavailable_reason();
  const GemmCase c(GetParam(), 99);
  const std::vector<float> native = c.run(cpu::amx::gemm_bf16_native);
  c.expect_matches_reference(native, "native");
  // Native against emulated: both add the two exact products of a pair into C one after the
  // other; the hardware may round the pair sum once instead, so they agree to within the
  // bound of one f32 rounding per pair (k / 2 + 1 roundings). Bitwise equality is counted.
  const std::vector<float> emulated = c.run(cpu::amx::gemm_bf16_emulated);
  std::int64_t equal = 0, total = 0;
  for (std::int64_t i = 0; i < c.s.m; ++i) {
    for (std::int64_t j = 0; j < c.s.n; ++j) {
      const float x = native[static_cast<std::size_t>(i * c.ldc + j)];
      const float y = emulated[static_cast<std::size_t>(i * c.ldc + j)];
      equal += x == y;
      ++total;
      ASSERT_LE(std::fabs(static_cast<double>(x) - y), 2 * c.bound(i, j)) << "C(" << i << ", " << j << ")";
    }
  }
  RecordProperty("bitwise_equal", std::to_string(equal) + "/" + std::to_string(total));
  std::printf("native == emulated bitwise: %lld of %lld\n", static_cast<long long>(equal),
              static_cast<long long>(total));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AmxGemm,
                         ::testing::Values(GemmShape{16, 16, 32, 0, false}, GemmShape{32, 32, 32, 0, false},
                                         GemmShape{32, 32, 64, 8, true}, GemmShape{16, 48, 64, 0, true},
                                         GemmShape{48, 16, 96, 16, false}, GemmShape{48, 80, 128, 4, true},
                                         GemmShape{64, 64, 128, 0, false}, GemmShape{96, 32, 256, 32, true},
                                         GemmShape{128, 128, 64, 0, true}),
                         shape_name);

TEST(AmxLayer, DetectionGivesAReasonWhenUnavailable) {
  if (cpu::amx::amx_available()) {
    EXPECT_STREQ(cpu::amx::amx_unavailable_reason(), "");
  } else {
    EXPECT_STRNE(cpu::amx::amx_unavailable_reason(), "");
  }
}

TEST(AmxLayer, ModeFromTheEnvironment) {
  {
    const ScopedEnv env("FASTATTN_CPU_AMX", std::nullopt);
    EXPECT_EQ(cpu::amx::amx_mode(), cpu::amx::amx_available() ? AmxMode::native : AmxMode::off);
  }
  {
    const ScopedEnv env("FASTATTN_CPU_AMX", "emulated");
    EXPECT_EQ(cpu::amx::amx_mode(), AmxMode::emulated);
  }
  {
    const ScopedEnv env("FASTATTN_CPU_AMX", "off");
    EXPECT_EQ(cpu::amx::amx_mode(), AmxMode::off);
  }
  {
    const ScopedEnv env("FASTATTN_CPU_AMX", "native");
    if (cpu::amx::amx_available()) {
      EXPECT_EQ(cpu::amx::amx_mode(), AmxMode::native);
    } else {
      EXPECT_THROW(cpu::amx::amx_mode(), Error);
    }
  }
  {
    const ScopedEnv env("FASTATTN_CPU_AMX", "fast");
    try {
      cpu::amx::amx_mode();
      ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "FASTATTN_CPU_AMX: expected native, emulated or off, got 'fast'");
    }
  }
}

}  // namespace
}  // namespace fastattn
