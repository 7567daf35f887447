// cpu_amx_backward_test.cpp — the bf16 backward on AMX tiles (src/cpu/backward_amx.hpp): which
// kernel the dispatcher names and why, and the layouts' edge cases (padded head dims, odd query
// starts and lengths, keys past a block's end, windows, GQA, varlen, strided views, soft-cap,
// deterministic mode) against float64 by the harness's 2x-naive rule, on the emulated tiles
// (any AVX-512 CPU) and on the native ones (skipped without AMX). ctest also reruns the CPU
// gradient suites with FASTATTN_CPU_AMX=emulated (the cpu_amx_emulated entry).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "api/dispatch.hpp"
#include "cpu/amx.hpp"
#include "cpu/cpu_backend.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using cpu::amx::AmxMode;

bool amx_kernels_built() {
  const std::vector<std::string> isas = build_info().cpu_isas_compiled;
  return cpu::amx::amx_compiled() && std::find(isas.begin(), isas.end(), "avx512") != isas.end() &&
         static_cast<int>(cpu::selected_isa()) >= static_cast<int>(cpu::Isa::avx512);
}

// FASTATTN_CPU_AMX=mode for a scope ("": as if unset).
std::optional<ScopedEnv> amx_env(const char* mode) {
  return std::optional<ScopedEnv>(std::in_place, cpu::amx::kAmxEnv, std::string(mode));
}

const char* const kAmxCases[] = {
    // One key block, one query block; d a multiple of 32.
    "b=1 sq=64 sk=64 h=1 hkv=1 d=128 dtype=bf16 mask=none seed=201",
    // Ragged blocks on both sides, GQA, causal in both alignments.
    "b=1 sq=200 sk=333 h=4 hkv=2 d=64 dtype=bf16 mask=causal seed=202",
    "b=1 sq=333 sk=200 h=4 hkv=1 d=64 dtype=bf16 mask=causal align=top_left seed=203",
    // Head dims padded to 32 (8, 40, 72, 96) and the largest.
    "b=2 sq=45 sk=77 h=2 hkv=1 d=8 dtype=bf16 mask=none seed=204",
    "b=1 sq=70 sk=90 h=2 hkv=2 d=40 dtype=bf16 mask=window wl=9 wr=4 seed=205",
    "b=1 sq=77 sk=45 h=4 hkv=1 d=72 dtype=bf16 mask=causal layout=strided det=1 threads=1 seed=206",
    "b=1 sq=100 sk=130 h=2 hkv=1 d=96 dtype=bf16 mask=causal wl=17 seed=207",
    "b=1 sq=33 sk=47 h=2 hkv=1 d=256 dtype=bf16 mask=none softcap=30 seed=208",
    // Windows starting queries at odd tokens; soft-cap with peaky scores.
    "b=1 sq=300 sk=300 h=2 hkv=2 d=64 dtype=bf16 mask=window wl=5 wr=0 seed=209",
    "b=1 sq=150 sk=90 h=2 hkv=1 d=128 dtype=bf16 mask=causal softcap=1 qk_std=2 seed=210",
    // Varlen with empty and length-1 sequences (rows that see no key), strided, 2 threads.
    "lens_q=0,1,65,7,0 lens_k=5,0,63,1,0 h=4 hkv=2 d=64 dtype=bf16 mask=causal layout=strided seed=211",
    "lens_q=100,1,33 lens_k=1,100,33 h=2 hkv=1 d=128 dtype=bf16 mask=window wl=5 wr=5 threads=2 seed=212",
    // Long keys: split mode (several key blocks add into the same dQ rows), deterministic.
    "b=1 sq=130 sk=700 h=2 hkv=1 d=128 dtype=bf16 mask=none det=1 threads=2 seed=213",
    "b=1 sq=1000 sk=1000 h=2 hkv=1 d=64 dtype=bf16 mask=causal threads=2 seed=214",
    // Fewer groups than threads: the concurrent split mode (2 groups, 3 splits each).
    "b=1 sq=300 sk=500 h=8 hkv=2 d=128 dtype=bf16 mask=causal threads=5 seed=215",
};

class AmxBackward : public ::testing::TestWithParam<const char*> {
 protected:
  void check(const char* mode, const char* marker) {
    if (!amx_kernels_built()) GTEST_SKIP() << "this build or CPU has no AVX-512 + AMX kernels";
    if (std::string(mode) == "native" && !cpu::amx::amx_available()) {
      GTEST_SKIP() << "no AMX: " << cpu::amx::amx_unavailable_reason();
    }
    const auto env = amx_env(mode);
    const harness::CheckReport r = harness::check_case(harness::parse_case(GetParam()), Backend::cpu);
    expect_pass(r);
    EXPECT_NE(r.backward_choice.kernel.find(marker), std::string::npos) << r.backward_choice.describe();
  }
};

TEST_P(AmxBackward, EmulatedMatchesFloat64) { check("emulated", ".amx-emulated.bf16."); }
TEST_P(AmxBackward, NativeMatchesFloat64) { check("native", ".amx.bf16."); }

INSTANTIATE_TEST_SUITE_P(Cases, AmxBackward, ::testing::ValuesIn(kAmxCases));

KernelChoice backward_choice_of(const char* case_text) {
  harness::CaseData data(harness::parse_case(case_text));
  return choose_kernel(data.problem(), Direction::backward, Backend::cpu);
}

TEST(AmxBackwardDispatch, Bf16TakesAmxWhereItRunsAndSaysWhy) {
  if (!amx_kernels_built()) GTEST_SKIP() << "this build or CPU has no AVX-512 + AMX kernels";
  const char* bf16 = "b=1 sq=64 sk=64 h=2 hkv=1 d=128 dtype=bf16 seed=1";
  {
    const auto env = amx_env("emulated");
    const KernelChoice c = backward_choice_of(bf16);
    EXPECT_NE(c.kernel.find(".amx-emulated.bf16.d128"), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find("AMX tiles"), std::string::npos) << c.describe();
    EXPECT_EQ(c.block_q % 32, 0);
    EXPECT_EQ(c.block_k % 32, 0);
    // f32 keeps its precision: the FMA kernels.
    const KernelChoice f32 = backward_choice_of("b=1 sq=64 sk=64 h=2 hkv=1 d=128 dtype=f32 seed=1");
    EXPECT_EQ(f32.kernel.find(".amx"), std::string::npos) << f32.describe();
  }
  {
    const auto env = amx_env("off");
    const KernelChoice c = backward_choice_of(bf16);
    EXPECT_EQ(c.kernel.find(".amx"), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find("FASTATTN_CPU_AMX=off"), std::string::npos) << c.describe();
  }
  {
    const auto env = amx_env("emulated");
    const ScopedEnv isa("FASTATTN_CPU_ISA", std::string("avx2"));
    const KernelChoice c = backward_choice_of(bf16);
    EXPECT_EQ(c.kernel.find(".amx"), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find("avx2"), std::string::npos) << c.describe();
  }
  if (cpu::amx::amx_available()) {
    {  // native asked for explicitly on a capped ISA: an error, as in the forward
      const auto env = amx_env("native");
      const ScopedEnv isa("FASTATTN_CPU_ISA", std::string("avx512bf16"));
      expect_error([&] { backward_choice_of(bf16); }, ErrorCode::unsupported,
                   "FASTATTN_CPU_AMX=native: expected the CPU ISA amx, got avx512bf16 (FASTATTN_CPU_ISA caps it)");
    }
    const auto env = amx_env("");  // unset: native where AMX runs
    const KernelChoice c = backward_choice_of(bf16);
    EXPECT_NE(c.kernel.find(".amx.bf16.d128"), std::string::npos) << c.describe();
  }
}

}  // namespace
}  // namespace fastattn::testing
