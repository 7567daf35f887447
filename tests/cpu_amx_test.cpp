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
#include "cpu/cpu_backend.hpp"
#include "fastattn/error.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using cpu::amx::AmxMode;
using fastattn::testing::ScopedEnv;
using fastattn::testing::expect_error;
using fastattn::testing::expect_pass;

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

// ---- the AMX forward kernel (src/cpu/forward_amx.hpp) ----------------------------------------

// Odd tile starts (windows, bottom-right offsets), odd and empty varlen sequences, GQA, soft-cap,
// strided views, every head dim the kernel takes (multiples of 32), rows beyond a 16-row tile.
const char* const kAmxCases[] = {
    "b=1 sq=1000 sk=1000 h=2 hkv=1 d=64 dtype=bf16 mask=causal seed=201",
    "b=1 sq=65 sk=63 h=4 hkv=2 d=128 dtype=bf16 mask=none seed=202",
    "b=2 sq=7 sk=1 h=2 hkv=2 d=32 dtype=bf16 mask=none seed=203",
    "b=1 sq=129 sk=257 h=2 hkv=1 d=64 dtype=bf16 mask=causal align=top_left seed=204",
    "b=1 sq=200 sk=301 h=2 hkv=2 d=96 dtype=bf16 mask=window wl=17 wr=5 seed=205",
    "b=1 sq=90 sk=90 h=2 hkv=1 d=160 dtype=bf16 mask=window wl=3 seed=206",
    "b=1 sq=33 sk=47 h=2 hkv=1 d=256 dtype=bf16 mask=none softcap=30 seed=207",
    "lens_q=0,1,65,7,0 lens_k=5,0,63,1,3 h=4 hkv=2 d=64 dtype=bf16 mask=causal layout=strided seed=208",
    "lens_q=13,64,1 lens_k=13,65,9 h=8 hkv=1 d=128 dtype=bf16 mask=none seed=209",
    "b=1 sq=300 sk=700 h=4 hkv=1 d=128 dtype=bf16 mask=causal seed=210",
    // A negative scale under a mask (masked scores must stay -inf once scaled).
    "b=1 sq=70 sk=80 h=2 hkv=1 d=64 dtype=bf16 mask=causal scale=-0.2 seed=211",
    // Peaky scores over many key tiles: later tiles' maxima exceed the lazy running max by more
    // than kMaxLag, so the single-pass softmax falls back to two passes mid-row.
    "b=1 sq=100 sk=1500 h=2 hkv=1 d=64 dtype=bf16 mask=none qk_std=6 seed=212",
};

// The AMX kernel on each case: native where the CPU has AMX (skipped elsewhere), emulated always.
class AmxForwardCases : public ::testing::TestWithParam<const char*> {};

TEST_P(AmxForwardCases, NativeMatchesFloat64) {
  if (!cpu::amx::amx_available()) GTEST_SKIP() << "no AMX: " << cpu::amx::amx_unavailable_reason();
  const ScopedEnv env(cpu::amx::kAmxEnv, "native");
  const harness::Case c = harness::parse_case(GetParam());
  harness::CaseData data(c);
  const KernelChoice choice = data.run_forward(Backend::cpu);
  EXPECT_EQ(choice.isa, "amx") << choice.describe();
  expect_pass(harness::check_case(c, Backend::cpu));
}

TEST_P(AmxForwardCases, EmulatedMatchesFloat64) {
  const ScopedEnv env(cpu::amx::kAmxEnv, "emulated");
  const harness::Case c = harness::parse_case(GetParam());
  harness::CaseData data(c);
  const KernelChoice choice = data.run_forward(Backend::cpu);
  EXPECT_NE(choice.kernel.find(".amx-emulated."), std::string::npos) << choice.describe();
  expect_pass(harness::check_case(c, Backend::cpu));
}

INSTANTIATE_TEST_SUITE_P(Cases, AmxForwardCases, ::testing::ValuesIn(kAmxCases));

KernelChoice bf16_forward_choice(const char* spec) {
  harness::CaseData data(harness::parse_case(spec));
  return data.run_forward(Backend::cpu);
}

// The kernel the process's environment asks for is the one that runs (ctest cpu_amx_emulated
// sets FASTATTN_CPU_AMX=emulated; the default entries run native AMX where available).
TEST(AmxForward, ChosenKernelFollowsTheEnvironment) {
  const char* env = std::getenv("FASTATTN_CPU_AMX");
  const std::string mode = env ? env : "";
  const KernelChoice choice = bf16_forward_choice("b=1 sq=40 sk=40 h=2 hkv=1 d=64 dtype=bf16 seed=3");
  if (mode == "emulated") {
    EXPECT_NE(choice.kernel.find(".amx-emulated.bf16.d64"), std::string::npos) << choice.describe();
    EXPECT_NE(choice.reason.find("FASTATTN_CPU_AMX=emulated"), std::string::npos) << choice.reason;
  } else if (mode.empty() && cpu::selected_isa() == cpu::Isa::amx && std::getenv("FASTATTN_CPU_BF16_DOT") == nullptr) {
    EXPECT_EQ(choice.kernel, "cpu.forward.amx.bf16.d64") << choice.describe();
    EXPECT_NE(choice.reason.find("AMX tiles"), std::string::npos) << choice.reason;
  } else {
    EXPECT_EQ(choice.kernel.find("amx"), std::string::npos) << choice.describe();
  }
}

// Why not AMX: the reason says so.
TEST(AmxForward, ReasonsWhyNot) {
  const char* bf16 = "b=1 sq=40 sk=40 h=2 hkv=1 d=64 dtype=bf16 seed=3";
  {
    const ScopedEnv env(cpu::amx::kAmxEnv, "off");
    const KernelChoice c = bf16_forward_choice(bf16);
    EXPECT_EQ(c.kernel.find("amx"), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find("AMX off (FASTATTN_CPU_AMX=off)"), std::string::npos) << c.reason;
  }
  {
    const ScopedEnv env(cpu::amx::kAmxEnv, std::nullopt);
    const KernelChoice c = bf16_forward_choice("b=1 sq=40 sk=40 h=2 hkv=1 d=40 dtype=bf16 seed=3");
    EXPECT_EQ(c.kernel.find("amx"), std::string::npos) << c.describe();
    if (cpu::amx::amx_available()) {
      EXPECT_NE(c.reason.find("no AMX kernel for head_dim 40 (needs a multiple of 32)"), std::string::npos)
          << c.reason;
    } else {
      EXPECT_NE(c.reason.find(std::string("no AMX: ") + cpu::amx::amx_unavailable_reason()), std::string::npos)
          << c.reason;
    }
    const KernelChoice f32 = bf16_forward_choice("b=1 sq=40 sk=40 h=2 hkv=1 d=64 dtype=f32 seed=3");
    EXPECT_EQ(f32.kernel.find("amx"), std::string::npos) << f32.describe();
    harness::CaseData data(harness::parse_case(bf16));
    data.run_forward(Backend::cpu);
  }
  if (cpu::amx::amx_available()) {
    const ScopedEnv unset(cpu::amx::kAmxEnv, std::nullopt);
    const ScopedEnv cap("FASTATTN_CPU_ISA", "avx512bf16");
    const KernelChoice c = bf16_forward_choice(bf16);
    EXPECT_EQ(c.isa, "avx512bf16") << c.describe();
    EXPECT_NE(c.reason.find("AMX not used: FASTATTN_CPU_ISA caps the ISA at avx512bf16"), std::string::npos)
        << c.reason;
    const ScopedEnv native(cpu::amx::kAmxEnv, "native");
    expect_error([&] { bf16_forward_choice(bf16); }, ErrorCode::unsupported,
                 "FASTATTN_CPU_AMX=native: expected the CPU ISA amx, got avx512bf16");
  }
  {
    const ScopedEnv env(cpu::amx::kAmxEnv, "sometimes");
    expect_error([&] { bf16_forward_choice(bf16); }, ErrorCode::invalid_argument,
                 "FASTATTN_CPU_AMX: expected native, emulated or off, got 'sometimes'");
  }
}

}  // namespace
}  // namespace fastattn
