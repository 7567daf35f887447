// reference_test.cpp — the float64 oracle against hand-computed values, and Backend::reference
// (the oracle rounded to the dtype, through the public API) against float64.
#include <gtest/gtest.h>

#include <ostream>

#include <cmath>
#include <limits>
#include <vector>

#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using harness::Case;
using harness::CaseData;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One query, two keys, scale 1: s = (2, 0), so out = (e^2 v0 + v1) / (e^2 + 1).
TEST(Reference, HandComputedTwoKeys) {
  const int d = 8;
  std::vector<float> q(d, 0.0f), k(2 * d, 0.0f), v(2 * d, 0.0f), out(d, -1.0f), lse(1, 0.0f);
  q[0] = 1.0f;
  k[0] = 2.0f;      // key 0: q.k = 2
  k[d + 1] = 1.0f;  // key 1: q.k = 0
  for (int c = 0; c < d; ++c) {
    v[c] = static_cast<float>(c + 1);
    v[d + c] = static_cast<float>(-c);
  }
  AttentionOptions o;
  o.softmax_scale = 1.0f;
  o.backend = Backend::reference;
  fastattn::forward(make_tensor(q.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(k.data(), DType::f32, {1, 2, 1, d}),
                    make_tensor(v.data(), DType::f32, {1, 2, 1, d}),
                    make_tensor(out.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(lse.data(), DType::f32, {1, 1, 1}), o);
  const double e2 = std::exp(2.0);
  EXPECT_FLOAT_EQ(lse[0], static_cast<float>(std::log(e2 + 1.0)));
  for (int c = 0; c < d; ++c)
    EXPECT_FLOAT_EQ(out[c], static_cast<float>((e2 * (c + 1) + (-c)) / (e2 + 1.0))) << "c=" << c;
}

// A single visible key: lse is its (soft-capped) score, out its value.
TEST(Reference, SoftcapOfSingleScore) {
  const int d = 8;
  std::vector<float> q(d, 0.0f), k(d, 0.0f), v(d, 0.5f), out(d), lse(1);
  q[0] = 5.0f;
  k[0] = 2.0f;  // q.k = 10
  AttentionOptions o;
  o.softmax_scale = 1.0f;
  o.softcap = 4.0f;
  o.backend = Backend::reference;
  fastattn::forward(make_tensor(q.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(k.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(v.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(out.data(), DType::f32, {1, 1, 1, d}),
                    make_tensor(lse.data(), DType::f32, {1, 1, 1}), o);
  EXPECT_FLOAT_EQ(lse[0], static_cast<float>(4.0 * std::tanh(10.0 / 4.0)));
  EXPECT_FLOAT_EQ(out[3], 0.5f);
}

// Mask semantics straight from options.hpp: with q = 0 every visible score is 0, so row i of
// out is uniform over its visible keys; with v_j = e_j, out[i][j] = visible(i, j) / count_i and
// lse_i = log(count_i) (-inf and a zero row when nothing is visible).
struct MaskCase {
  int sq, sk;
  bool causal;
  std::int64_t left, right;
  MaskAlignment alignment;
};

// Readable test names ("sq=7 sk=3 causal left=-1 right=-1 top_left") instead of raw bytes.
void PrintTo(const MaskCase& m, std::ostream* os) {
  *os << "sq=" << m.sq << " sk=" << m.sk << (m.causal ? " causal" : "") << " left=" << m.left
      << " right=" << m.right
      << (m.alignment == MaskAlignment::bottom_right ? " bottom_right" : " top_left");
}

class ReferenceMask : public ::testing::TestWithParam<MaskCase> {};

TEST_P(ReferenceMask, MatchesTheDocumentedInequalities) {
  const MaskCase m = GetParam();
  const int d = 16;  // >= sk: v_j = e_j
  std::vector<float> q(static_cast<std::size_t>(m.sq * d), 0.0f), k(static_cast<std::size_t>(m.sk * d), 1.0f),
      v(static_cast<std::size_t>(m.sk * d), 0.0f), out(q.size(), -7.0f), lse(static_cast<std::size_t>(m.sq), 0.0f);
  for (int j = 0; j < m.sk; ++j) v[static_cast<std::size_t>(j * d + j)] = 1.0f;
  AttentionOptions o;
  o.causal = m.causal;
  o.window_left = m.left;
  o.window_right = m.right;
  o.alignment = m.alignment;
  o.backend = Backend::reference;
  fastattn::forward(make_tensor(q.data(), DType::f32, {1, m.sq, 1, d}),
                    make_tensor(k.data(), DType::f32, {1, m.sk, 1, d}),
                    make_tensor(v.data(), DType::f32, {1, m.sk, 1, d}),
                    make_tensor(out.data(), DType::f32, {1, m.sq, 1, d}),
                    make_tensor(lse.data(), DType::f32, {1, 1, m.sq}), o);
  const std::int64_t right = m.causal ? 0 : m.right;
  const std::int64_t offset = m.alignment == MaskAlignment::bottom_right ? m.sk - m.sq : 0;
  for (int i = 0; i < m.sq; ++i) {
    std::vector<bool> visible(static_cast<std::size_t>(m.sk));
    int count = 0;
    for (int j = 0; j < m.sk; ++j) {
      const std::int64_t diag = i + offset;
      visible[static_cast<std::size_t>(j)] =
          (m.left < 0 || j >= diag - m.left) && (right < 0 || j <= diag + right);
      count += visible[static_cast<std::size_t>(j)];
    }
    EXPECT_EQ(lse[static_cast<std::size_t>(i)], count ? static_cast<float>(std::log(count)) : -INFINITY) << "row " << i;
    for (int j = 0; j < d; ++j) {
      const float want = j < m.sk && visible[static_cast<std::size_t>(j)] ? 1.0f / static_cast<float>(count) : 0.0f;
      EXPECT_NEAR(out[static_cast<std::size_t>(i * d + j)], want, 1e-6) << "row " << i << " col " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Masks, ReferenceMask,
    ::testing::Values(MaskCase{5, 5, true, -1, -1, MaskAlignment::bottom_right},
                      MaskCase{3, 7, true, -1, -1, MaskAlignment::bottom_right},
                      MaskCase{7, 3, true, -1, -1, MaskAlignment::bottom_right},  // empty rows
                      MaskCase{7, 3, true, -1, -1, MaskAlignment::top_left},
                      MaskCase{3, 7, true, -1, -1, MaskAlignment::top_left},
                      MaskCase{6, 9, true, 2, -1, MaskAlignment::bottom_right},
                      MaskCase{6, 9, false, 1, 2, MaskAlignment::top_left},
                      MaskCase{6, 9, false, -1, 0, MaskAlignment::top_left},
                      MaskCase{9, 6, false, 0, -1, MaskAlignment::bottom_right},
                      MaskCase{9, 6, false, 0, 0, MaskAlignment::bottom_right},
                      MaskCase{4, 12, false, 3, 3, MaskAlignment::bottom_right}));

// GQA: a KV head shared by a group equals the same KV head copied once per query head.
TEST(Reference, GqaEqualsRepeatedKvHeads) {
  Case c = harness::parse_case("b=2 sq=9 sk=11 h=4 hkv=2 d=16 dtype=f32 mask=causal seed=3");
  CaseData gqa(c);
  Case wide = c;
  wide.num_kv_heads = 4;
  CaseData mha(wide);
  for (std::int64_t i = 0; i < mha.q.numel(); ++i) mha.q.set(i, gqa.q.get(i));
  const std::int64_t d = c.head_dim;
  for (std::int64_t i = 0; i < mha.k.numel(); ++i) {  // [b, s, 4, d] <- [b, s, 2, d], head h/2
    const std::int64_t c_ = i % d, h = (i / d) % 4, bs = i / (d * 4);
    mha.k.set(i, gqa.k.get((bs * 2 + h / 2) * d + c_));
    mha.v.set(i, gqa.v.get((bs * 2 + h / 2) * d + c_));
  }
  const reference::ForwardResult a = reference::forward_f64(gqa.problem());
  const reference::ForwardResult b = reference::forward_f64(mha.problem());
  ASSERT_EQ(a.out.size(), b.out.size());
  for (std::size_t i = 0; i < a.out.size(); ++i) EXPECT_EQ(a.out[i], b.out[i]) << i;
  for (std::size_t i = 0; i < a.lse.size(); ++i) EXPECT_EQ(a.lse[i], b.lse[i]) << i;
}

// Backend::reference through the public API, against float64, across random cases.
class ReferenceSweep : public ::testing::TestWithParam<int> {};

TEST_P(ReferenceSweep, MatchesFloat64) {
  harness::CaseLimits limits;
  limits.max_work = 1'000'000;
  const Case c = harness::random_case(static_cast<std::uint64_t>(GetParam()) + 10'000, limits);
  expect_pass(harness::check_case(c, Backend::reference));
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReferenceSweep, ::testing::Range(0, 40));

// Results of Backend::reference are exactly the float64 results rounded to the dtype.
TEST(Reference, BackendIsRoundedFloat64) {
  for (const char* text : {"b=1 sq=17 sk=5 h=2 hkv=1 d=24 dtype=bf16 mask=window wl=3 wr=1 seed=9",
                           "lens_q=4,0,9 lens_k=3,5,0 h=3 hkv=3 d=8 dtype=f16 mask=causal seed=2"}) {
    const Case c = harness::parse_case(text);
    CaseData data(c);
    data.run_forward(Backend::reference);
    const reference::ForwardResult f = reference::forward_f64(data.problem());
    CaseData expected(c);
    expected.set_forward_outputs(f.out, f.lse);
    for (std::int64_t i = 0; i < data.out.numel(); ++i)
      ASSERT_EQ(data.out.bits(i), expected.out.bits(i)) << text << " out element " << i;
    for (std::int64_t i = 0; i < data.lse.numel(); ++i)
      ASSERT_EQ(data.lse.bits(i), expected.lse.bits(i)) << text << " lse element " << i;
  }
}

}  // namespace
}  // namespace fastattn::testing
