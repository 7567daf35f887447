// cpu_bf16_dot_test.cpp — the bf16-pair CPU forward (src/cpu/forward_bf16.hpp): vdpbf16ps on CPUs
// with AVX-512 BF16, and the same kernel with the dot product emulated, which
// FASTATTN_CPU_BF16_DOT=emulated selects on any CPU so that the pair layouts (Q and K pairs
// along head_dim, P and V pairs along keys, odd tile starts and sequence lengths) are checked
// here. ctest also reruns the CPU case suites with that variable set (cpu_bf16_dot_emulated).
// On an AVX-512 BF16 CPU, FASTATTN_CPU_BF16_DOT=native runs the vdpbf16ps kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cpu/cpu_backend.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

// FASTATTN_CPU_BF16_DOT set (or, with nullopt, unset) for one scope.
ScopedEnv bf16_dot_env(const std::optional<std::string>& value) { return ScopedEnv(cpu::kBf16DotEnv, value); }

// Odd tile starts (windows, bottom-right offsets), odd and empty varlen sequences, GQA,
// soft-cap, strided views, head dims whose pair count is odd (40 -> 20 pairs, 8 -> 4).
const char* const kPairCases[] = {
    "b=1 sq=1000 sk=1000 h=2 hkv=1 d=64 dtype=bf16 mask=causal seed=101",
    "b=1 sq=65 sk=63 h=4 hkv=2 d=128 dtype=bf16 mask=none seed=102",
    "b=2 sq=7 sk=1 h=2 hkv=2 d=40 dtype=bf16 mask=none seed=103",
    "b=1 sq=129 sk=257 h=2 hkv=1 d=64 dtype=bf16 mask=causal align=top_left seed=104",
    "b=1 sq=200 sk=301 h=2 hkv=2 d=96 dtype=bf16 mask=window wl=17 wr=5 seed=105",
    "b=1 sq=90 sk=90 h=2 hkv=1 d=8 dtype=bf16 mask=window wl=3 seed=106",
    "b=1 sq=33 sk=47 h=2 hkv=1 d=256 dtype=bf16 mask=none softcap=30 seed=107",
    "lens_q=0,1,65,7,0 lens_k=5,0,63,1,3 h=4 hkv=2 d=64 dtype=bf16 mask=causal layout=strided seed=108",
    "lens_q=13,64,1 lens_k=13,65,9 h=8 hkv=1 d=128 dtype=bf16 mask=none seed=109",
};

class Bf16DotEmulated : public ::testing::TestWithParam<const char*> {};

// The pair kernel is the prefill kernel's form: the decode route (seqlen_q <= 16, its own forms,
// cpu_decode_test.cpp) is turned off, so the short cases run the pair kernel too.
TEST_P(Bf16DotEmulated, MatchesFloat64) {
  const ScopedEnv env = bf16_dot_env("emulated");
  const ScopedEnv prefill("FASTATTN_CPU_DECODE", "off");
  const harness::Case c = harness::parse_case(GetParam());
  harness::CaseData data(c);
  const KernelChoice choice = data.run_forward(Backend::cpu);
  EXPECT_NE(choice.kernel.find(".bf16dot-emulated."), std::string::npos) << choice.kernel;
  expect_pass(harness::check_case(c, Backend::cpu));
}

INSTANTIATE_TEST_SUITE_P(Cases, Bf16DotEmulated, ::testing::ValuesIn(kPairCases));

// Varlen tokens outside every sequence (before cu_seqlens_k[0], from cu_seqlens_k[batch] on)
// are allowed by the API and never read; the pair kernel's V staging skips them. Compared with
// the f32 kernel on the same call (P rounded to bf16 in one of them: a loose tolerance).
TEST(Bf16Dot, VarlenTokensOutsideEverySequenceAreSkipped) {
  const std::int64_t total_q = 12, total_k = 17, heads = 2, d = 64;
  const std::vector<std::int32_t> cu_q = {1, 6, 10}, cu_k = {2, 9, 14};  // + leading/trailing tokens
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_bf16 = [&](std::int64_t n) {
    std::vector<std::uint16_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = float_to_bf16(normal(rng));
    return v;
  };
  std::vector<std::uint16_t> q = random_bf16(total_q * heads * d), k = random_bf16(total_k * heads * d),
                             v = random_bf16(total_k * heads * d);
  std::vector<std::int32_t> cq = cu_q, ck = cu_k;
  AttentionOptions options;
  options.cu_seqlens_q = make_tensor(cq.data(), DType::i32, {3});
  options.cu_seqlens_k = make_tensor(ck.data(), DType::i32, {3});
  auto run = [&](const char* mode) {
    const ScopedEnv env = bf16_dot_env(mode);
    const ScopedEnv prefill("FASTATTN_CPU_DECODE", "off");  // sequences of 5 and 4 queries: the pair kernel
    std::vector<std::uint16_t> out(static_cast<std::size_t>(total_q * heads * d), 0);
    const KernelChoice choice = forward(make_tensor(q.data(), DType::bf16, {total_q, heads, d}),
                                        make_tensor(k.data(), DType::bf16, {total_k, heads, d}),
                                        make_tensor(v.data(), DType::bf16, {total_k, heads, d}),
                                        make_tensor(out.data(), DType::bf16, {total_q, heads, d}), std::nullopt,
                                        options);
    return std::make_pair(choice.kernel, out);
  };
  const auto [pair_kernel, pair_out] = run("emulated");
  const auto [f32_kernel, f32_out] = run("off");
  EXPECT_NE(pair_kernel.find("bf16dot-emulated"), std::string::npos) << pair_kernel;
  for (std::int64_t t = cu_q.front(); t < cu_q.back(); ++t) {
    for (std::int64_t e = 0; e < heads * d; ++e) {
      const std::size_t i = static_cast<std::size_t>(t * heads * d + e);
      const float a = bf16_to_float(pair_out[i]), b = bf16_to_float(f32_out[i]);
      ASSERT_TRUE(std::isfinite(a)) << "token " << t;
      ASSERT_NEAR(a, b, 0.02f + 0.02f * std::fabs(b)) << "token " << t << " element " << e;
    }
  }
}

// The shapes below have seqlen_q 17, one more than kDecodeMaxQueries: they test the prefill
// kernel's choice (shorter queries run the decode kernel, cpu_decode_test.cpp).
TEST(Bf16Dot, OnlyBf16InputsTakeThePairKernel) {
  const ScopedEnv env = bf16_dot_env("emulated");
  harness::CaseData f32(harness::parse_case("b=1 sq=17 sk=17 h=1 hkv=1 d=64 dtype=f32 mask=none seed=1"));
  EXPECT_EQ(f32.run_forward(Backend::cpu).kernel.find("bf16dot"), std::string::npos);
  harness::CaseData f16(harness::parse_case("b=1 sq=17 sk=17 h=1 hkv=1 d=64 dtype=f16 mask=none seed=1"));
  EXPECT_EQ(f16.run_forward(Backend::cpu).kernel.find("bf16dot"), std::string::npos);
}

// By default the native kernel runs only on AVX-512 BF16 CPUs where vdpbf16ps measured at least
// kBf16DotMinRatio times the FMA's FLOP rate; `native` forces it there and is an error elsewhere;
// `off` disables it.
TEST(Bf16Dot, NativeOnlyWhereItPaysOrWhenForced) {
  harness::CaseData bf16(harness::parse_case("b=1 sq=17 sk=17 h=1 hkv=1 d=64 dtype=bf16 mask=none seed=1"));
  const bool has_dot = cpu::selected_isa() == cpu::Isa::avx512bf16 || cpu::selected_isa() == cpu::Isa::amx;
  {
    // The pair kernel's own rule, with the AMX kernel (the default where AMX runs) turned off.
    const ScopedEnv env = bf16_dot_env(std::nullopt);
    const ScopedEnv no_amx(cpu::amx::kAmxEnv, "off");
    const KernelChoice choice = bf16.run_forward(Backend::cpu);
    const bool pays = has_dot && cpu::bf16_dot_speed_ratio() >= cpu::kBf16DotMinRatio;
    EXPECT_EQ(choice.kernel.find(".bf16dot.") != std::string::npos, pays) << choice.kernel;
    if (has_dot) {
      EXPECT_NE(choice.reason.find("vdpbf16ps measured"), std::string::npos) << choice.reason;
    }
  }
  {
    const ScopedEnv env = bf16_dot_env("native");
    if (has_dot) {
      EXPECT_NE(bf16.run_forward(Backend::cpu).kernel.find(".bf16dot."), std::string::npos);
      expect_pass(harness::check_case(harness::parse_case(kPairCases[0]), Backend::cpu));
    } else {
      expect_error([&] { bf16.run_forward(Backend::cpu); }, ErrorCode::unsupported,
                   "FASTATTN_CPU_BF16_DOT=native: expected a CPU with AVX-512 BF16");
    }
  }
  {
    const ScopedEnv env = bf16_dot_env("off");
    EXPECT_EQ(bf16.run_forward(Backend::cpu).kernel.find("bf16dot"), std::string::npos);
  }
}

TEST(Bf16Dot, BadVariableValueIsAnError) {
  const ScopedEnv env = bf16_dot_env("fast");
  harness::CaseData bf16(harness::parse_case("b=1 sq=17 sk=17 h=1 hkv=1 d=64 dtype=bf16 mask=none seed=1"));
  expect_error([&] { bf16.run_forward(Backend::cpu); }, ErrorCode::invalid_argument,
               "FASTATTN_CPU_BF16_DOT: expected native, emulated or off, got 'fast'");
}

}  // namespace
}  // namespace fastattn::testing
