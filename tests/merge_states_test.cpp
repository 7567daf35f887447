// merge_states_test.cpp — fastattn::merge_states on the CPU (and its float64 reference path).
//
// The main check (merge_support.hpp): split the keys of a random case in two, run forward() on
// each part with lse, merge, and judge the result against the float64 oracle of the unsplit
// call; then the special rows (-inf on one or both sides, NaN, +inf), in-place merges, varlen
// layouts and the kernel report.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "merge_support.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct SplitCase {
  const char* text;
  std::int64_t split;
};

// Odd sizes, GQA, every dtype, head dims 8 / 64 / 72 / 128, causal splits where one part has
// fully masked rows (lse -inf on that side) and sq > sk (rows without any key: both -inf), and
// splits at 0 / seqlen_k (one part has no keys at all).
const SplitCase kSplitCases[] = {
    {"b=2 sq=7 sk=40 h=4 hkv=2 d=64 dtype=f32 mask=none", 17},
    {"b=1 sq=1 sk=33 h=8 hkv=8 d=128 dtype=bf16 mask=none", 5},
    {"b=1 sq=1 sk=33 h=8 hkv=1 d=128 dtype=f16 mask=causal", 32},
    {"b=2 sq=63 sk=63 h=2 hkv=1 d=64 dtype=f16 mask=causal", 20},
    {"b=1 sq=63 sk=40 h=3 hkv=1 d=8 dtype=f16 mask=causal", 13},
    {"b=2 sq=7 sk=9 h=8 hkv=2 d=72 dtype=bf16 mask=causal", 0},
    {"b=1 sq=7 sk=9 h=2 hkv=2 d=72 dtype=f32 mask=causal", 9},
    {"b=3 sq=63 sk=100 h=4 hkv=4 d=128 dtype=bf16 mask=causal", 64},
    {"b=1 sq=65 sk=7 h=4 hkv=2 d=64 dtype=f32 mask=causal", 3},
};

void PrintTo(const SplitCase& c, std::ostream* os) { *os << "'" << c.text << "' split " << c.split; }

class SplitMerge : public ::testing::TestWithParam<std::tuple<SplitCase, int>> {};

TEST_P(SplitMerge, MatchesUnsplitForwardAndFloat64) {
  const auto [sc, layout_index] = GetParam();
  MergeLayout layout;
  layout.strided = layout_index == 1;
  layout.in_place = layout_index == 2;
  HostPlace cpu;
  const SplitMergeReport r = check_split_merge(harness::parse_case(sc.text), sc.split, cpu, layout);
  EXPECT_TRUE(r.pass) << r.to_string();
  EXPECT_EQ(r.merge_choice.backend, Backend::cpu);
}

INSTANTIATE_TEST_SUITE_P(Cases, SplitMerge,
                         ::testing::Combine(::testing::ValuesIn(kSplitCases), ::testing::Values(0, 1, 2)),
                         [](const auto& param_info) {
                           const int layout = std::get<1>(param_info.param);
                           return "case" + std::to_string(param_info.index / 3) +
                                  (layout == 0 ? "_contiguous" : layout == 1 ? "_strided" : "_in_place");
                         });

// ---- special rows, on small hand-made tensors ---------------------------------------------------
// One batch, 1 token, `rows` heads of head_dim 8: row r is head r.
struct Rows {
  static constexpr std::int64_t D = 8;
  std::int64_t n;
  std::vector<float> a, b, out, lse_a, lse_b, lse;
  explicit Rows(std::int64_t rows)
      : n(rows), a(n * D), b(n * D), out(n * D, 123.0f), lse_a(n), lse_b(n), lse(n, 123.0f) {
    for (std::int64_t i = 0; i < n * D; ++i) {
      a[i] = 0.25f + 0.01f * static_cast<float>(i);
      b[i] = -1.5f + 0.03f * static_cast<float>(i);
    }
  }
  TensorView view(std::vector<float>& x) { return make_tensor(x.data(), DType::f32, {1, 1, n, D}); }
  TensorView lse_view(std::vector<float>& x) { return make_tensor(x.data(), DType::f32, {1, n, 1}); }
  KernelChoice merge(Backend backend = Backend::cpu) {
    MergeOptions o;
    o.backend = backend;
    return merge_states(view(a), lse_view(lse_a), view(b), lse_view(lse_b), view(out), lse_view(lse), o);
  }
};

class MergeSpecialRows : public ::testing::TestWithParam<Backend> {};

TEST_P(MergeSpecialRows, InfinityAndNaNFollowTheDocumentedRule) {
  Rows r(6);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // 0: A has no keys (its out is garbage); 1: B has no keys; 2: neither (both garbage);
  // 3: NaN lse; 4: +inf lse; 5: a gap exp() underflows (B weight exactly 0).
  r.lse_a = {-kInf, 1.5f, -kInf, nan, kInf, 200.0f};
  r.lse_b = {0.75f, -kInf, -kInf, 0.0f, 0.0f, -10.0f};
  for (std::int64_t d = 0; d < Rows::D; ++d) {
    r.a[0 * Rows::D + d] = nan;
    r.b[1 * Rows::D + d] = nan;
    r.a[2 * Rows::D + d] = nan;
    r.b[2 * Rows::D + d] = kInf;
  }
  r.merge(GetParam());
  for (std::int64_t d = 0; d < Rows::D; ++d) {
    EXPECT_EQ(r.out[0 * Rows::D + d], r.b[0 * Rows::D + d]) << "A without keys: out is out_b, exactly";
    EXPECT_EQ(r.out[1 * Rows::D + d], r.a[1 * Rows::D + d]) << "B without keys: out is out_a, exactly";
    EXPECT_EQ(r.out[2 * Rows::D + d], 0.0f) << "no keys at all: out 0";
    EXPECT_TRUE(std::isnan(r.out[3 * Rows::D + d])) << "NaN lse: NaN row";
    EXPECT_TRUE(std::isnan(r.out[4 * Rows::D + d])) << "+inf lse: NaN row";
    EXPECT_EQ(r.out[5 * Rows::D + d], r.a[5 * Rows::D + d]) << "B's weight underflows to 0";
  }
  EXPECT_EQ(r.lse[0], 0.75f);
  EXPECT_EQ(r.lse[1], 1.5f);
  EXPECT_EQ(r.lse[2], -kInf);
  EXPECT_TRUE(std::isnan(r.lse[3]));
  EXPECT_TRUE(std::isnan(r.lse[4]));
  EXPECT_EQ(r.lse[5], 200.0f);
}

TEST_P(MergeSpecialRows, EqualLseAveragesAndAddsLog2) {
  Rows r(2);
  r.lse_a = {3.0f, -50.0f};
  r.lse_b = {3.0f, -50.0f};
  r.merge(GetParam());
  for (std::int64_t i = 0; i < 2 * Rows::D; ++i) EXPECT_NEAR(r.out[i], 0.5f * (r.a[i] + r.b[i]), 1e-6f);
  EXPECT_NEAR(r.lse[0], 3.0f + std::log(2.0f), 1e-6f);
  EXPECT_NEAR(r.lse[1], -50.0f + std::log(2.0f), 1e-5f);
}

INSTANTIATE_TEST_SUITE_P(Backends, MergeSpecialRows, ::testing::Values(Backend::cpu, Backend::reference),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// Large lse values (a long context with big scores) stay finite: the max-shift form never
// evaluates exp(lse) itself.
TEST(MergeStates, LargeLseDoesNotOverflow) {
  Rows r(2);
  r.lse_a = {1.0e4f, -1.0e4f};
  r.lse_b = {1.0e4f - 1.0f, -1.0e4f + 0.5f};
  r.merge();
  const double wa0 = 1.0 / (1.0 + std::exp(-1.0)), wa1 = 1.0 / (1.0 + std::exp(0.5));
  for (std::int64_t d = 0; d < Rows::D; ++d) {
    EXPECT_NEAR(r.out[d], wa0 * r.a[d] + (1 - wa0) * r.b[d], 1e-5);
    EXPECT_NEAR(r.out[Rows::D + d], wa1 * r.a[Rows::D + d] + (1 - wa1) * r.b[Rows::D + d], 1e-5);
  }
  EXPECT_NEAR(r.lse[0], 1.0e4 + std::log1p(std::exp(-1.0)), 1e-3);
  EXPECT_NEAR(r.lse[1], -1.0e4 + 0.5 + std::log1p(std::exp(-0.5)), 1e-3);
}

// lse is optional; out alone is written.
TEST(MergeStates, WithoutLseOutput) {
  Rows r(3);
  r.lse_a = {0.0f, 1.0f, 2.0f};
  r.lse_b = {2.0f, 1.0f, 0.0f};
  const KernelChoice c = merge_states(r.view(r.a), r.lse_view(r.lse_a), r.view(r.b), r.lse_view(r.lse_b), r.view(r.out),
                                      std::nullopt);
  EXPECT_EQ(c.kernel, "cpu.merge_states.f32");
  EXPECT_EQ(r.lse, std::vector<float>(3, 123.0f));
  EXPECT_NEAR(r.out[Rows::D], 0.5f * (r.a[Rows::D] + r.b[Rows::D]), 1e-6f);
}

// Varlen layouts ([total_q, heads, head_dim] with lse [heads, total_q]) and every dtype: the
// CPU path against the float64 reference path, within one rounding of the dtype.
TEST(MergeStates, VarlenLayoutEveryDtypeMatchesReferenceBackend) {
  constexpr std::int64_t T = 11, H = 3, D = 24;
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<std::int64_t> shape = {T, H, D};
    harness::HostTensor a(dtype, shape), b(dtype, shape), cpu_out(dtype, shape), ref_out(dtype, shape);
    harness::HostTensor la(DType::f32, {H, T}), lb(DType::f32, {H, T}), cpu_lse(DType::f32, {H, T}), ref_lse(DType::f32, {H, T});
    for (std::int64_t i = 0; i < T * H * D; ++i) {
      a.set(i, std::sin(0.3 * static_cast<double>(i)) + 0.1);
      b.set(i, std::cos(0.7 * static_cast<double>(i)) - 0.2);
    }
    for (std::int64_t i = 0; i < H * T; ++i) {
      la.set(i, i % 7 == 0 ? -kInf : 4.0 * std::sin(1.3 * static_cast<double>(i)));
      lb.set(i, i % 5 == 0 ? -kInf : 4.0 * std::cos(0.9 * static_cast<double>(i)));
    }
    MergeOptions cpu, ref;
    cpu.backend = Backend::cpu;
    ref.backend = Backend::reference;
    merge_states(a.view(), la.view(), b.view(), lb.view(), cpu_out.view(), cpu_lse.view(), cpu);
    const KernelChoice rc = merge_states(a.view(), la.view(), b.view(), lb.view(), ref_out.view(), ref_lse.view(), ref);
    EXPECT_EQ(rc.kernel, "reference.merge_states.f64");
    const double eps = harness::epsilon(dtype);
    for (std::int64_t i = 0; i < T * H * D; ++i) {
      EXPECT_NEAR(cpu_out.get(i), ref_out.get(i), eps * (std::fabs(ref_out.get(i)) + 1e-3) + 1e-6) << to_string(dtype) << " element " << i;
    }
    for (std::int64_t i = 0; i < H * T; ++i) {
      if (std::isinf(ref_lse.get(i))) {
        EXPECT_EQ(cpu_lse.get(i), ref_lse.get(i));
      } else {
        EXPECT_NEAR(cpu_lse.get(i), ref_lse.get(i), 1e-5);
      }
    }
  }
}

// Merges chain: ((A, B), C) == forward over A + B + C, accumulated in place into A.
TEST(MergeStates, ChainedInPlaceAccumulationMatchesUnsplit) {
  const harness::Case c = harness::parse_case("b=1 sq=9 sk=50 h=4 hkv=2 d=64 dtype=f32 mask=causal");
  harness::CaseData data(c);
  AttentionOptions o = data.options(Backend::cpu);
  harness::HostTensor acc = make_out(c.dtype, c, false), acc_lse = make_lse(c, false);
  harness::HostTensor part = make_out(c.dtype, c, false), part_lse = make_lse(c, false);
  harness::HostTensor whole = make_out(c.dtype, c, false);
  forward(data.q.view(), data.k.view(), data.v.view(), whole.view(), std::nullopt, o);
  const std::int64_t bounds[] = {0, 11, 30, 50};
  for (int i = 0; i < 3; ++i) {
    AttentionOptions po = o;
    part_mask(c, bounds[i], bounds[i + 1] - bounds[i], po);
    harness::HostTensor& dst = i == 0 ? acc : part;
    harness::HostTensor& dst_lse = i == 0 ? acc_lse : part_lse;
    forward(data.q.view(), key_slice(data.k.view(), bounds[i], bounds[i + 1] - bounds[i]),
            key_slice(data.v.view(), bounds[i], bounds[i + 1] - bounds[i]), dst.view(), dst_lse.view(), po);
    if (i > 0) merge_states(acc.view(), acc_lse.view(), part.view(), part_lse.view(), acc.view(), acc_lse.view());
  }
  for (std::int64_t i = 0; i < whole.numel(); ++i) EXPECT_NEAR(acc.get(i), whole.get(i), 2e-6) << "element " << i;
}

TEST(MergeStates, EmptyCallWritesNothingAndReportsTheKernel) {
  std::vector<std::uint16_t> none;
  const TensorView out = make_tensor(none.data(), DType::bf16, {2, 0, 4, 64});
  const TensorView lse = make_tensor(none.data(), DType::f32, {2, 4, 0});
  const KernelChoice c = merge_states(out, lse, out, lse, out, lse);
  EXPECT_EQ(c.backend, Backend::cpu);
  EXPECT_EQ(c.kernel, "cpu.merge_states.bf16");
  EXPECT_EQ(plan_merge_states(out, lse, out, lse, out, lse).kernel, "cpu.merge_states.bf16");
}

}  // namespace
}  // namespace fastattn::testing
