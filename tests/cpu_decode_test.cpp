// cpu_decode_test.cpp — the CPU decode kernel (src/cpu/decode_kernel.hpp) against the float64
// oracle through the harness (2 x naive rule, poisoned outputs, strided padding, masked rows).
//
// Decode shapes: seqlen_q 1, 2, 4, 7, 16 over seqlen_k 0, 1, 17, 1000, 5000, every pair, with
// GQA 1:1 / 4:1 / 7:1, masks, dtypes and layouts rotated over the pairs so each appears with
// short and long caches; then chosen cases (rows that see no key, varlen with empty sequences,
// every feature at once), each also with forced split counts (FASTATTN_CPU_DECODE_SPLITS,
// including more splits than keys). On an AMX machine the bf16 cases with >= 8 rows per KV head
// run the AMX form; the ctest entries cpu_bf16_dot_emulated, cpu_isa_avx2 and
// cpu_decode_amx_emulated run this suite again with the bf16-pair dot product emulated, with
// the AVX2 kernels, and with the AMX form on emulated tiles.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

harness::CheckOptions forward_only() {
  harness::CheckOptions o;
  o.backward = false;
  return o;
}

std::vector<std::string> decode_grid() {
  const int seqlens_q[] = {1, 2, 4, 7, 16};
  const int seqlens_k[] = {0, 1, 17, 1000, 5000};
  const char* heads[] = {"h=4 hkv=4", "h=8 hkv=2", "h=7 hkv=1"};
  const char* masks[] = {"mask=causal",
                         "mask=causal align=top_left",
                         "mask=none",
                         "mask=window wl=9 wr=0",
                         "mask=none softcap=5",
                         "mask=window wl=300 wr=2 align=top_left"};
  const char* dtypes[] = {"dtype=bf16", "dtype=f32", "dtype=f16"};
  const char* dims[] = {"d=128", "d=64", "d=40"};
  std::vector<std::string> cases;
  int n = 0;
  for (int sq : seqlens_q) {
    for (int sk : seqlens_k) {
      cases.push_back("b=2 sq=" + std::to_string(sq) + " sk=" + std::to_string(sk) + " " + heads[n % 3] + " " +
                      dims[(n / 3) % 3] + " " + dtypes[(n / 2) % 3] + " " + masks[n % 6] +
                      (n % 4 == 3 ? " layout=strided" : "") + " seed=" + std::to_string(100 + n));
      ++n;
    }
  }
  return cases;
}

const char* const kChosen[] = {
    // Bottom-right causal with more queries than keys: the first rows see no key.
    "b=1 sq=16 sk=5 h=8 hkv=2 d=64 dtype=bf16 mask=causal seed=201",
    "b=1 sq=7 sk=1 h=7 hkv=1 d=128 dtype=f32 mask=causal seed=202",
    // A window that hides every key from some rows (right edge before key 0).
    "b=1 sq=4 sk=3 h=4 hkv=1 d=64 dtype=f16 mask=window wl=0 wr=0 align=top_left seed=203",
    // Varlen with empty sequences on either side, strided, GQA.
    "lens_q=0,1,4,16,0,2 lens_k=5,0,1000,37,0,5000 h=8 hkv=2 d=64 dtype=bf16 mask=causal layout=strided seed=204",
    "lens_q=1,3,1 lens_k=17,0,1000 h=7 hkv=1 d=72 dtype=f32 mask=window wl=50 wr=0 softcap=3 seed=205",
    // MQA with many heads (more packed rows than one unit: row chunks), every feature.
    "b=1 sq=16 sk=1000 h=32 hkv=1 d=64 dtype=bf16 mask=causal softcap=20 layout=strided seed=206",
    "b=3 sq=5 sk=300 h=16 hkv=16 d=256 dtype=bf16 mask=window wl=64 wr=-1 seed=207",
    // Peaky softmax and a negative scale.
    "b=1 sq=2 sk=1000 h=8 hkv=2 d=128 dtype=f32 mask=none qk_std=2 seed=208",
    "b=1 sq=4 sk=1000 h=4 hkv=2 d=64 dtype=bf16 mask=causal scale=-0.2 seed=209",
    // Odd head dims (tails of the bf16 pair loads) and explicit threads.
    "b=2 sq=3 sk=77 h=6 hkv=3 d=8 dtype=bf16 mask=none threads=3 seed=210",
    "b=1 sq=1 sk=5000 h=4 hkv=1 d=96 dtype=bf16 mask=causal threads=1 seed=211",
    // 64 packed rows at d 8: under bf16_dot P's bf16 rows fill the f32 K tile they borrow.
    "b=1 sq=16 sk=77 h=8 hkv=2 d=8 dtype=bf16 mask=causal seed=215",
    // bf16 on AVX-512 (decode_bf16_split.hpp): 5-7 rows per KV head (blocks of 4 rows and a
    // remainder, below the AMX threshold), head dims with a partial 32-column chunk, key tiles
    // ending mid-block, soft-cap and strided rows.
    "b=2 sq=1 sk=1000 h=7 hkv=1 d=128 dtype=bf16 mask=causal seed=212",
    "b=1 sq=1 sk=333 h=12 hkv=2 d=40 dtype=bf16 mask=none softcap=5 layout=strided seed=213",
    "b=2 sq=1 sk=77 h=5 hkv=1 d=72 dtype=bf16 mask=window wl=40 wr=0 seed=214",
};

class DecodeGrid : public ::testing::TestWithParam<std::string> {};

TEST_P(DecodeGrid, MatchesFloat64) {
  const harness::CheckReport r = harness::check_case(harness::parse_case(GetParam()), Backend::cpu, forward_only());
  expect_pass(r);
  EXPECT_EQ(r.forward_choice.kernel.rfind("cpu.decode.", 0), 0u) << r.forward_choice.kernel;
}
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeGrid, ::testing::ValuesIn(decode_grid()));

class DecodeChosen : public ::testing::TestWithParam<const char*> {};

TEST_P(DecodeChosen, MatchesFloat64) {
  expect_pass(harness::check_case(harness::parse_case(GetParam()), Backend::cpu, forward_only()));
}

// The same cases with the key splits forced: one, a few, and more splits than keys (empty
// splits with lse = -inf, folded away by the merge).
TEST_P(DecodeChosen, MatchesFloat64WithForcedSplits) {
  for (const char* splits : {"1", "3", "64"}) {
    const ScopedEnv env("FASTATTN_CPU_DECODE_SPLITS", std::string(splits));
    const harness::CheckReport r = harness::check_case(harness::parse_case(GetParam()), Backend::cpu, forward_only());
    expect_pass(r);
    EXPECT_NE(r.forward_choice.kernel.find(std::string(".split") + splits), std::string::npos)
        << r.forward_choice.kernel;
  }
}

// Both bf16 vector forms on an AVX-512 BF16 CPU, whichever the measured rule takes by default
// (decode_plan: vdpbf16ps against the f32 FMA): both products on vdpbf16ps, P rounded to bf16
// (FASTATTN_CPU_BF16_DOT=native, DecodeForm::bf16_dot) and on widened f32 FMAs (=emulated,
// bf16_widened). AMX off, so that shapes with 8+ rows per KV head run these forms too. The cases
// have odd key counts (the pair form's lone last key) and head dims that are not multiples of
// 32 or 64 (its masked column blocks).
TEST_P(DecodeChosen, MatchesFloat64InBothBf16Forms) {
  const cpu::Isa isa = cpu::selected_isa();
  if (isa != cpu::Isa::avx512bf16 && isa != cpu::Isa::amx) GTEST_SKIP() << "no AVX-512 BF16 here";
  const harness::Case c = harness::parse_case(GetParam());
  if (c.dtype != DType::bf16) GTEST_SKIP() << "not a bf16 case";
  const ScopedEnv no_amx("FASTATTN_CPU_AMX", std::string("off"));
  for (const auto& [dot, form] : {std::pair<const char*, const char*>{"native", ".dot.bf16."},
                                  std::pair<const char*, const char*>{"emulated", ".widened.bf16."}}) {
    const ScopedEnv env("FASTATTN_CPU_BF16_DOT", std::string(dot));
    const harness::CheckReport r = harness::check_case(c, Backend::cpu, forward_only());
    expect_pass(r);
    EXPECT_NE(r.forward_choice.kernel.find(form), std::string::npos) << dot << ": " << r.forward_choice.kernel;
  }
}
INSTANTIATE_TEST_SUITE_P(Cases, DecodeChosen, ::testing::ValuesIn(kChosen));

// Forward and backward of a decode shape: the backward reads the decode kernel's out and lse.
TEST(Decode, BackwardOfDecodeForward) {
  expect_pass(harness::check_case(
      harness::parse_case("b=1 sq=4 sk=300 h=8 hkv=2 d=64 dtype=bf16 mask=causal seed=212"), Backend::cpu));
}

// The dispatcher: decode up to kDecodeMaxQueries queries, prefill above; the environment
// forces either; a bad value is an error naming the variable.
KernelChoice plan_of(std::int64_t sq, std::int64_t sk, DType dtype = DType::bf16) {
  static std::vector<std::uint16_t> q, out, kv;  // plan_forward reads shapes only
  q.resize(static_cast<std::size_t>(sq * 32 * 128));
  out.resize(q.size());
  kv.resize(static_cast<std::size_t>(sk * 8 * 128));
  const TensorView tq = make_tensor(q.data(), dtype, {1, sq, 32, 128});
  const TensorView to = make_tensor(out.data(), dtype, {1, sq, 32, 128});
  const TensorView tkv = make_tensor(kv.data(), dtype, {1, sk, 8, 128});
  AttentionOptions o;
  o.backend = Backend::cpu;
  o.causal = true;
  return plan_forward(tq, tkv, tkv, to, std::nullopt, o);
}

TEST(Decode, DispatcherChoosesDecodeForShortQueries) {
  EXPECT_EQ(plan_of(1, 4096).kernel.rfind("cpu.decode.", 0), 0u);
  EXPECT_EQ(plan_of(16, 4096).kernel.rfind("cpu.decode.", 0), 0u);
  EXPECT_EQ(plan_of(17, 4096).kernel.rfind("cpu.forward.", 0), 0u);
  EXPECT_NE(plan_of(1, 4096).kernel.find(".gqa4."), std::string::npos);
  EXPECT_NE(plan_of(1, 4096).reason.find("merged exactly"), std::string::npos);
  {
    const ScopedEnv env("FASTATTN_CPU_DECODE", std::string("off"));
    EXPECT_EQ(plan_of(1, 4096).kernel.rfind("cpu.forward.", 0), 0u);
  }
  {
    const ScopedEnv env("FASTATTN_CPU_DECODE", std::string("on"));
    EXPECT_EQ(plan_of(64, 4096).kernel.rfind("cpu.decode.", 0), 0u);
  }
  {
    const ScopedEnv env("FASTATTN_CPU_DECODE_SPLITS", std::string("0"));
    expect_error([] { plan_of(1, 4096); }, ErrorCode::invalid_argument,
                 "FASTATTN_CPU_DECODE_SPLITS: expected an integer in [1, 4096], got '0'");
  }
  {
    const ScopedEnv env("FASTATTN_CPU_DECODE", std::string("sometimes"));
    expect_error([] { plan_of(1, 4096); }, ErrorCode::invalid_argument,
                 "FASTATTN_CPU_DECODE: expected auto, on or off, got 'sometimes'");
  }
}

// The decode form (cpu::DecodeForm, in the kernel name and the reason): bf16 K/V read in
// place, both products on vdpbf16ps on every AVX-512 BF16 CPU whatever its rate, widened on
// AVX-512 without the extension (FASTATTN_CPU_ISA=avx512); f16, and AVX2, stage f32 tiles;
// FASTATTN_CPU_BF16_DOT=off forces the tiles. AMX off here (its form has its own tests:
// cpu_decode_amx_emulated).
TEST(Decode, FormFollowsDtypeAndIsa) {
  const ScopedEnv no_amx("FASTATTN_CPU_AMX", std::string("off"));
  const ScopedEnv isa_unset("FASTATTN_CPU_ISA", std::nullopt);
  const ScopedEnv dot_unset("FASTATTN_CPU_BF16_DOT", std::nullopt);
  const ScopedEnv decode_auto("FASTATTN_CPU_DECODE", std::nullopt);
  const bool avx512 = plan_of(1, 4096, DType::f16).isa.rfind("avx512", 0) == 0;
  if (avx512) {
    const cpu::Isa isa = cpu::selected_isa();
    const bool dot = isa == cpu::Isa::avx512bf16 || isa == cpu::Isa::amx;
    EXPECT_NE(plan_of(1, 4096).kernel.find(dot ? ".dot.bf16." : ".widened.bf16."), std::string::npos)
        << plan_of(1, 4096).kernel;
    EXPECT_NE(plan_of(1, 4096).reason.find(dot ? "on bf16 pairs (vdpbf16ps)" : "widened in registers, f32 FMAs"),
              std::string::npos)
        << plan_of(1, 4096).reason;
    const ScopedEnv plain("FASTATTN_CPU_ISA", std::string("avx512"));
    EXPECT_EQ(plan_of(1, 4096).kernel.rfind("cpu.decode.avx512.widened.bf16.", 0), 0u) << plan_of(1, 4096).kernel;
  }
  EXPECT_EQ(plan_of(1, 4096, DType::f16).kernel.find(".widened."), std::string::npos);
  EXPECT_NE(plan_of(1, 4096, DType::f16).reason.find("K/V tiles converted in L1"), std::string::npos);
  {
    const ScopedEnv off("FASTATTN_CPU_BF16_DOT", std::string("off"));
    EXPECT_EQ(plan_of(1, 4096).kernel.find(".widened."), std::string::npos) << plan_of(1, 4096).kernel;
    EXPECT_NE(plan_of(1, 4096).reason.find("FASTATTN_CPU_BF16_DOT=off"), std::string::npos);
  }
  {
    const ScopedEnv avx2("FASTATTN_CPU_ISA", std::string("avx2"));
    EXPECT_EQ(plan_of(1, 4096).kernel.rfind("cpu.decode.avx2.bf16.", 0), 0u) << plan_of(1, 4096).kernel;
    const ScopedEnv pairs("FASTATTN_CPU_BF16_DOT", std::string("emulated"));
    EXPECT_EQ(plan_of(1, 4096).kernel.rfind("cpu.decode.avx2.bf16dot-emulated.bf16.", 0), 0u) << plan_of(1, 4096).kernel;
  }
  // A bad value, or native without AVX-512 BF16, is an error on the decode route too.
  {
    const ScopedEnv bad("FASTATTN_CPU_BF16_DOT", std::string("sometimes"));
    expect_error([] { plan_of(1, 4096); }, ErrorCode::invalid_argument,
                 "FASTATTN_CPU_BF16_DOT: expected native, emulated or off, got 'sometimes'");
  }
  if (avx512) {
    const ScopedEnv plain("FASTATTN_CPU_ISA", std::string("avx512"));
    const ScopedEnv native("FASTATTN_CPU_BF16_DOT", std::string("native"));
    expect_error([] { plan_of(1, 4096); }, ErrorCode::unsupported, "FASTATTN_CPU_BF16_DOT=native");
  }
}

// Longer queries forced onto the decode kernel (row chunks, several tokens per chunk) still
// match: the kernel serves any seqlen_q, the threshold is only a speed choice.
TEST(Decode, ForcedOnLongerQueries) {
  const ScopedEnv env("FASTATTN_CPU_DECODE", std::string("on"));
  expect_pass(harness::check_case(
      harness::parse_case("b=1 sq=40 sk=200 h=6 hkv=2 d=64 dtype=bf16 mask=causal layout=strided seed=213"),
      Backend::cpu, forward_only()));
}

}  // namespace
}  // namespace fastattn::testing
