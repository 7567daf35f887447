// harness_test.cpp — the check harness itself: case strings, the generator's coverage, guarded
// tensors and the tolerance rule (a harness that passes everything would hide every bug).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>

#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using harness::Case;
using harness::CaseData;
using harness::HostTensor;

TEST(Harness, CaseStringsRoundTrip) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Case c = harness::random_case(seed);
    const std::string text = c.to_string();
    EXPECT_EQ(harness::parse_case(text).to_string(), text);
  }
}

TEST(Harness, ParseCaseRejectsBadTokens) {
  expect_error([] { harness::parse_case("b=2 dtype=f64"); }, ErrorCode::invalid_argument,
               "case: expected dtype=f32|f16|bf16, got 'dtype=f64'");
  expect_error([] { harness::parse_case("sq=abc"); }, ErrorCode::invalid_argument,
               "case: expected an integer value, got 'sq=abc'");
  expect_error([] { harness::parse_case("colour=red"); }, ErrorCode::invalid_argument,
               "got 'colour=red'");
  expect_error([] { harness::parse_case("lens_q=1,2"); }, ErrorCode::invalid_argument,
               "lens_q and lens_k of equal counts");
}

TEST(Harness, RandomCasesCoverEveryOption) {
  harness::CaseLimits limits;
  limits.allow_long = true;
  limits.max_work = std::numeric_limits<std::int64_t>::max();
  std::set<std::string> seen;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    const Case c = harness::random_case(seed, limits);
    seen.insert(std::string("dtype ") + to_string(c.dtype));
    seen.insert(c.causal ? (c.window_left >= 0 ? "sliding causal" : "causal")
                         : (c.window_left >= 0 || c.window_right >= 0 ? "window" : "no mask"));
    seen.insert(c.alignment == MaskAlignment::top_left ? "top_left" : "bottom_right");
    const std::int64_t ratio = c.num_heads / c.num_kv_heads;
    seen.insert(c.num_kv_heads == 1 && ratio > 1 ? "mqa" : "ratio " + std::to_string(ratio));
    if (c.softcap > 0.0f) seen.insert("softcap");
    if (c.softmax_scale > 0.0f) seen.insert("scale");
    if (c.strided) seen.insert("strided");
    if (c.deterministic) seen.insert("deterministic");
    if (c.is_varlen()) {
      seen.insert("varlen");
      for (std::size_t b = 0; b < c.seqlens_q.size(); ++b) {
        if (c.seqlens_q[b] == 0 || c.seqlens_k[b] == 0) seen.insert("empty sequence");
        if (c.seqlens_q[b] == 1 || c.seqlens_k[b] == 1) seen.insert("length-1 sequence");
      }
    } else {
      if (c.seqlen_q > c.seqlen_k) seen.insert("sq > sk");
      if (c.seqlen_q < c.seqlen_k) seen.insert("sq < sk");
      for (std::int64_t n : {1, 7, 63, 65, 1000})
        if (c.seqlen_q == n || c.seqlen_k == n) seen.insert("len " + std::to_string(n));
    }
    if (c.head_dim == 8) seen.insert("d 8");
    if (c.head_dim == 256) seen.insert("d 256");
  }
  for (const char* want :
       {"dtype f32", "dtype f16", "dtype bf16", "no mask", "causal", "sliding causal", "window",
        "top_left", "bottom_right", "ratio 1", "ratio 2", "ratio 4", "mqa", "softcap", "scale",
        "strided", "deterministic", "varlen", "empty sequence", "length-1 sequence", "sq > sk",
        "sq < sk", "len 1", "len 7", "len 63", "len 65", "len 1000", "d 8", "d 256"})
    EXPECT_TRUE(seen.count(want)) << "no random case has: " << want;
}

TEST(Harness, RandomCasesRespectTheWorkLimit) {
  harness::CaseLimits limits;
  limits.max_work = 200'000;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const Case c = harness::random_case(seed, limits);
    EXPECT_LE(harness::attention_flops(c, false) / 4.0, 200'000.0 * 1.0001) << c.to_string();
    EXPECT_EQ(c.num_heads % c.num_kv_heads, 0) << c.to_string();
    EXPECT_EQ(c.head_dim % 8, 0) << c.to_string();
  }
}

TEST(Harness, FlopsFollowTheFlashAttentionConvention) {
  const Case dense = harness::parse_case("b=2 sq=128 sk=128 h=4 hkv=4 d=64");
  EXPECT_DOUBLE_EQ(harness::attention_flops(dense, false), 4.0 * 2 * 4 * 128 * 128 * 64);
  EXPECT_DOUBLE_EQ(harness::attention_flops(dense, true), 2.5 * 4.0 * 2 * 4 * 128 * 128 * 64);
  const Case causal = harness::parse_case("b=1 sq=128 sk=128 h=1 hkv=1 d=64 mask=causal");
  EXPECT_DOUBLE_EQ(harness::attention_flops(causal, false), 4.0 * 64 * (128.0 * 129 / 2));
}

// Strided tensors: guards around and between elements, detection of writes outside the view.
TEST(Harness, GuardedTensorsDetectStrayWrites) {
  HostTensor t(DType::bf16, {2, 3, 2, 8}, {3 * 2 * 12 + 5, 2 * 12 + 1, 12, 1}, 2, 4);
  EXPECT_EQ(t.numel(), 96);
  EXPECT_EQ(t.count_guard_clobbered(), 0);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, 1.5);
  EXPECT_EQ(t.count_guard_clobbered(), 0);
  EXPECT_EQ(t.get(95), 1.5);
  auto* base = static_cast<std::uint16_t*>(t.view().data);
  base[8] = 0;  // gap after the first head row (head stride 12 > head_dim 8)
  EXPECT_EQ(t.count_guard_clobbered(), 1);
  base[-1] = 0;  // just before the base pointer
  EXPECT_EQ(t.count_guard_clobbered(), 2);
  t.fill_view_bits(harness::poison_bits(DType::bf16));
  EXPECT_EQ(t.count_view_bits(harness::poison_bits(DType::bf16)), 96);
  EXPECT_TRUE(std::isnan(t.get(0)));
}

TEST(Harness, InputsAreRandomNonZeroAndOutputsPoisoned) {
  CaseData data(harness::parse_case("b=2 sq=33 sk=17 h=2 hkv=1 d=16 dtype=bf16 layout=strided seed=5"));
  for (const HostTensor* t : {&data.q, &data.k, &data.v, &data.dout}) {
    double sum2 = 0.0;
    for (std::int64_t i = 0; i < t->numel(); ++i) {
      ASSERT_NE(t->get(i), 0.0);
      ASSERT_TRUE(std::isfinite(t->get(i)));
      sum2 += t->get(i) * t->get(i);
    }
    EXPECT_NEAR(sum2 / static_cast<double>(t->numel()), 1.0, 0.25);  // unit variance
  }
  for (const HostTensor* t : {&data.out, &data.lse, &data.dq, &data.dk, &data.dv})
    EXPECT_EQ(t->count_view_bits(harness::poison_bits(t->dtype())), t->numel());
  // Different seeds, different values.
  CaseData other(harness::parse_case("b=2 sq=33 sk=17 h=2 hkv=1 d=16 dtype=bf16 layout=strided seed=6"));
  EXPECT_NE(data.q.get(0), other.q.get(0));
}

// The judge: the rounded oracle passes; NaN, unwritten elements, a wrong -inf and errors well
// above the naive error fail.
class Judge : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = std::make_unique<CaseData>(
        harness::parse_case("b=1 sq=40 sk=50 h=2 hkv=1 d=32 dtype=f16 mask=causal seed=8"));
    ref_ = reference::forward_f64(data_->problem());
    naive_ = harness::naive_forward(data_->problem());
    data_->set_forward_outputs(ref_.out, ref_.lse);
  }
  harness::TensorCheck judge_out() {
    return harness::judge_tensor("out", data_->out, data_->out.values(), ref_.out, naive_.out,
                                 naive_.out_terms, DType::f16, 32, false);
  }
  harness::TensorCheck judge_lse() {
    return harness::judge_tensor("lse", data_->lse, data_->lse_values(), ref_.lse, naive_.lse,
                                 naive_.lse_terms, DType::f16, 32, true);
  }
  std::unique_ptr<CaseData> data_;
  reference::ForwardResult ref_;
  harness::NaiveForward naive_;
};

TEST_F(Judge, RoundedOraclePasses) {
  EXPECT_TRUE(judge_out().pass) << judge_out().to_string();
  EXPECT_TRUE(judge_lse().pass) << judge_lse().to_string();
  EXPECT_GT(judge_out().naive.max_abs, 0.0);  // the naive error is measurable
}

TEST_F(Judge, NanFails) {
  data_->out.set(17, std::numeric_limits<double>::quiet_NaN());
  const harness::TensorCheck t = judge_out();
  EXPECT_FALSE(t.pass);
  EXPECT_EQ(t.non_finite, 1);
}

TEST_F(Judge, UnwrittenFails) {
  data_->out.fill_view_bits(harness::poison_bits(DType::f16));
  const harness::TensorCheck t = judge_out();
  EXPECT_FALSE(t.pass);
  EXPECT_EQ(t.unwritten, data_->out.numel());
  EXPECT_EQ(t.non_finite, 0);
}

TEST_F(Judge, ErrorsFarAboveTheNaiveOnesFail) {
  // Eight f16 ulps on the largest element.
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < data_->out.numel(); ++i)
    if (std::fabs(data_->out.get(i)) > std::fabs(data_->out.get(at))) at = i;
  const double x = data_->out.get(at);
  data_->out.set(at, x + 8.0 * std::ldexp(1.0, std::ilogb(x) - 10));
  EXPECT_FALSE(judge_out().pass) << judge_out().to_string();
}

TEST_F(Judge, LseMismatchesFail) {
  data_->lse.set(3, -std::numeric_limits<double>::infinity());  // a row that sees keys
  EXPECT_FALSE(judge_lse().pass);
  EXPECT_EQ(judge_lse().masked_rows_wrong, 1);
  data_->set_forward_outputs(ref_.out, ref_.lse);
  data_->lse.set(5, data_->lse.get(5) + 1e-3);
  EXPECT_FALSE(judge_lse().pass) << judge_lse().to_string();
}

// A check that compares no tensor proves nothing: it fails and says so (`fastattn check
// --backward-only` on a backend without a backward, or nothing requested at all).
TEST(Harness, CheckingNoTensorFails) {
  harness::CheckOptions nothing;
  nothing.forward = false;
  nothing.backward = false;
  const harness::CheckReport r =
      harness::check_case(harness::parse_case("b=1 sq=8 sk=8 h=1 hkv=1 d=16 seed=2"), Backend::cpu, nothing);
  EXPECT_FALSE(r.pass) << r.to_string();
  EXPECT_TRUE(r.tensors.empty());
  EXPECT_NE(r.error.find("checked no tensor"), std::string::npos) << r.error;
}

// Under FASTATTN_CPU_ISA (the ctest entry cpu_isa_avx2 caps an AVX-512 machine at AVX2) the CPU
// backend runs, and the harness reports, the capped kernels: the entry tests what it names.
TEST(Harness, CpuRunsTheIsaCappedByTheEnvironment) {
  const char* cap = std::getenv("FASTATTN_CPU_ISA");
  if (cap == nullptr || *cap == '\0') GTEST_SKIP() << "FASTATTN_CPU_ISA is not set";
  const std::vector<std::string> compiled = build_info().cpu_isas_compiled;
  const std::string want = cap;
  if (std::find(compiled.begin(), compiled.end(), want) == compiled.end())
    GTEST_SKIP() << "this build has no " << want << " kernels";
  const harness::CheckReport r =
      harness::check_case(harness::parse_case("b=1 sq=40 sk=40 h=2 hkv=1 d=64 dtype=f32 seed=4"), Backend::cpu);
  EXPECT_TRUE(r.pass) << r.to_string();
  EXPECT_EQ(r.forward_choice.isa, want) << r.forward_choice.describe();
  EXPECT_EQ(r.backward_choice.isa, want) << r.backward_choice.describe();
}

// The naive baseline is an honest same-precision implementation: close to float64, not equal.
TEST(Harness, NaiveBaselineIsCloseToFloat64) {
  CaseData data(harness::parse_case("b=1 sq=70 sk=90 h=2 hkv=2 d=64 dtype=f32 softcap=5 seed=21"));
  const reference::ForwardResult f = reference::forward_f64(data.problem());
  const harness::NaiveForward n = harness::naive_forward(data.problem());
  const harness::ErrorStats e = harness::error_of(n.out, f.out);
  EXPECT_GT(e.max_abs, 0.0);
  EXPECT_LT(e.rel_fro, 1e-5);
  data.set_forward_outputs(f.out, f.lse);
  const reference::BackwardResult g = reference::backward_f64(data.problem());
  const harness::NaiveBackward nb = harness::naive_backward(data.problem());
  EXPECT_LT(harness::error_of(nb.dq, g.dq).rel_fro, 1e-4);
  EXPECT_LT(harness::error_of(nb.dk, g.dk).rel_fro, 1e-4);
  EXPECT_LT(harness::error_of(nb.dv, g.dv).rel_fro, 1e-4);
}

TEST(Harness, MeasureReportsTimings) {
  harness::PerfOptions o;
  o.warmup = 1;
  o.repeats = 3;
  const harness::PerfReport r =
      harness::measure(harness::parse_case("b=1 sq=64 sk=64 h=2 hkv=1 d=64 seed=3"), Backend::reference, o);
  EXPECT_GT(r.median_seconds, 0.0);
  EXPECT_GE(r.median_seconds, r.min_seconds);
  EXPECT_GT(r.gflops, 0.0);
  EXPECT_EQ(r.choice.backend, Backend::reference);
}

}  // namespace
}  // namespace fastattn::testing
