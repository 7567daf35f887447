// edge_cases_test.cpp — empty calls, rows that see no key, optional arguments, broadcasting.
#include <gtest/gtest.h>

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

const Backend kBackends[] = {Backend::cpu, Backend::reference};

// seqlen 0 (queries, keys or both), batch 0 and all-empty varlen batches are valid calls.
// With no keys every query row gets out = 0, lse = -inf and dq = 0; with no queries dk = dv = 0.
const char* const kEmptyCases[] = {
    "b=2 sq=0 sk=0 h=2 hkv=1 d=64 dtype=f32 mask=none seed=1",
    "b=2 sq=0 sk=9 h=2 hkv=1 d=64 dtype=bf16 mask=causal seed=2",
    "b=2 sq=9 sk=0 h=2 hkv=1 d=64 dtype=f16 mask=none seed=3",
    "b=0 sq=5 sk=5 h=2 hkv=2 d=32 dtype=f32 mask=none seed=4",
    "lens_q=0,0 lens_k=0,3 h=2 hkv=1 d=32 dtype=f32 mask=none seed=5",
    "lens_q=0,4,0 lens_k=0,0,6 h=4 hkv=2 d=16 dtype=bf16 mask=causal layout=strided seed=6",
};

class EmptyCall : public ::testing::TestWithParam<const char*> {};

TEST_P(EmptyCall, IsValidAndWritesZerosWhereDefined) {
  for (Backend backend : kBackends) {
    SCOPED_TRACE(to_string(backend));
    expect_pass(harness::check_case(harness::parse_case(GetParam()), backend));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EmptyCall, ::testing::ValuesIn(kEmptyCases));

// Rows that see no key: out exactly 0, lse exactly -inf, dq exactly 0, never NaN.
struct MaskedRowsCase {
  const char* text;
  std::int64_t first_empty, last_empty;  // query rows [first, last] see no key (every head)
};

class MaskedRows : public ::testing::TestWithParam<MaskedRowsCase> {};

TEST_P(MaskedRows, GiveZeroOutputMinusInfinityLseAndZeroGradient) {
  const MaskedRowsCase m = GetParam();
  const Case c = harness::parse_case(m.text);
  for (Backend backend : kBackends) {
    SCOPED_TRACE(to_string(backend));
    expect_pass(harness::check_case(c, backend));  // also compares every other row
    CaseData data(c);
    data.run_forward(backend);
    const std::int64_t h = c.num_heads, d = c.head_dim;
    const std::vector<double> out = data.out.values(), lse = data.lse_values();
    for (std::int64_t i = 0; i < c.seqlen_q; ++i) {
      const bool empty = i >= m.first_empty && i <= m.last_empty;
      for (std::int64_t hh = 0; hh < h; ++hh) {
        const double l = lse[static_cast<std::size_t>(hh * c.seqlen_q + i)];
        if (empty) {
          EXPECT_EQ(l, -std::numeric_limits<double>::infinity()) << "row " << i << " head " << hh;
          for (std::int64_t x = 0; x < d; ++x)
            ASSERT_EQ(out[static_cast<std::size_t>((i * h + hh) * d + x)], 0.0) << "row " << i;
        } else {
          EXPECT_TRUE(std::isfinite(l)) << "row " << i << " head " << hh;
        }
      }
    }
    const reference::ForwardResult f = reference::forward_f64(data.problem());
    data.set_forward_outputs(f.out, f.lse);
    data.run_backward(backend);
    const std::vector<double> dq = data.dq.values();
    for (std::int64_t i = m.first_empty; i <= m.last_empty; ++i)
      for (std::int64_t x = 0; x < h * d; ++x)
        ASSERT_EQ(dq[static_cast<std::size_t>(i * h * d + x)], 0.0) << "dq row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MaskedRows,
    ::testing::Values(
        // Bottom-right causal with Sq > Sk: the first Sq - Sk rows come before every key.
        MaskedRowsCase{"b=1 sq=12 sk=5 h=2 hkv=1 d=32 dtype=f32 mask=causal seed=7", 0, 6},
        MaskedRowsCase{"b=1 sq=70 sk=3 h=2 hkv=2 d=64 dtype=bf16 mask=causal seed=8", 0, 66},
        // Top-left diagonal band: rows past the last key see nothing.
        MaskedRowsCase{"b=1 sq=9 sk=4 h=1 hkv=1 d=16 dtype=f16 mask=window wl=0 wr=0 align=top_left seed=9", 4, 8},
        // A window that ends before key 0 for the first rows (right = 0, bottom-right, Sq > Sk).
        MaskedRowsCase{"b=1 sq=80 sk=10 h=1 hkv=1 d=64 dtype=f32 mask=window wl=2 wr=0 seed=10", 0, 69}));

// No softmax_scale means 1/sqrt(head_dim) as a float; no lse means the same out.
TEST(EdgeCases, DefaultScaleAndOptionalLse) {
  const Case c = harness::parse_case("b=1 sq=33 sk=40 h=2 hkv=1 d=40 dtype=f32 mask=causal seed=12");
  CaseData data(c);
  data.run_forward(Backend::cpu);
  const std::vector<double> expected = data.out.values();
  AttentionOptions o = data.options(Backend::cpu);
  o.softmax_scale.reset();
  data.out.fill_view_bits(harness::poison_bits(DType::f32));
  fastattn::forward(data.q.view(), data.k.view(), data.v.view(), data.out.view(), data.lse.view(), o);
  EXPECT_TRUE(data.out.values() == expected) << "default scale differs from 1/sqrt(d)";
  data.out.fill_view_bits(harness::poison_bits(DType::f32));
  fastattn::forward(data.q.view(), data.k.view(), data.v.view(), data.out.view(), std::nullopt,
                    data.options(Backend::cpu));
  EXPECT_TRUE(data.out.values() == expected) << "out without lse differs";
}

// Inputs may broadcast (stride 0): one K/V sequence shared by the whole batch.
TEST(EdgeCases, BroadcastKeysAndValues) {
  for (Backend backend : kBackends) {
    SCOPED_TRACE(to_string(backend));
    const Case c = harness::parse_case("b=3 sq=20 sk=30 h=2 hkv=2 d=32 dtype=f32 mask=none seed=13");
    CaseData data(c);
    TensorView k = data.k.view(), v = data.v.view();
    k.stride[0] = 0;  // every batch reads batch 0's keys and values
    v.stride[0] = 0;
    AttentionOptions o = data.options(backend);
    fastattn::forward(data.q.view(), k, v, data.out.view(), data.lse.view(), o);
    // The same call with batch 0's K/V copied into every batch.
    CaseData copy(c);
    const std::int64_t per_batch = copy.k.numel() / 3;
    for (std::int64_t i = 0; i < copy.k.numel(); ++i) {
      copy.k.set(i, data.k.get(i % per_batch));
      copy.v.set(i, data.v.get(i % per_batch));
    }
    copy.run_forward(backend);
    EXPECT_TRUE(data.out.values() == copy.out.values());
  }
}

// Automatic picks the CPU backend for CPU tensors.
TEST(EdgeCases, AutomaticBackendIsCpu) {
  CaseData data(harness::parse_case("b=1 sq=8 sk=8 h=1 hkv=1 d=64 dtype=f32 seed=14"));
  EXPECT_EQ(data.run_forward(Backend::automatic).backend, Backend::cpu);
}

// Huge logits (scores of std ~ 36) must not overflow the softmax.
TEST(EdgeCases, LargeLogitsStayFinite) {
  for (const char* text : {"b=1 sq=50 sk=60 h=1 hkv=1 d=64 dtype=f32 mask=none qk_std=6 seed=15",
                           "b=1 sq=50 sk=60 h=1 hkv=1 d=64 dtype=bf16 mask=causal qk_std=6 seed=16"}) {
    expect_pass(harness::check_case(harness::parse_case(text), Backend::cpu));
  }
}

// A caller's workspace gives the same gradients as the internal pool.
TEST(EdgeCases, CallerWorkspace) {
  const Case c = harness::parse_case("b=1 sq=70 sk=90 h=4 hkv=2 d=64 dtype=f32 mask=causal det=1 seed=17");
  CaseData data(c);
  const reference::ForwardResult f = reference::forward_f64(data.problem());
  data.set_forward_outputs(f.out, f.lse);
  const KernelChoice plan = data.run_backward(Backend::cpu);
  const std::vector<double> dq = data.dq.values(), dk = data.dk.values();
  std::vector<std::uint8_t> memory(plan.workspace_bytes + 64);
  Workspace w{memory.data(), memory.size()};
  AttentionOptions o = data.options(Backend::cpu);
  o.workspace = &w;
  fastattn::backward(data.dout.view(), data.q.view(), data.k.view(), data.v.view(), data.out.view(),
                     data.lse.view(), data.dq.view(), data.dk.view(), data.dv.view(), o);
  EXPECT_TRUE(data.dq.values() == dq);
  EXPECT_TRUE(data.dk.values() == dk);
}

}  // namespace
}  // namespace fastattn::testing
