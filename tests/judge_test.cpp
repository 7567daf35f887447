// judge_test.cpp — the judge catches plausible kernel bugs that stay small in the largest
// elements of a tensor: a kernel that never reads the last 16 keys of a long causal row, and one
// whose softmax scale is 1% off. Each faulty kernel is simulated: the float64 reference on a
// problem with the fault (keys truncated, scale * 1.01), rounded to the dtype like a kernel's
// output, is fed to the judge in place of a backend's result.
//
// With a whole-tensor max-abs bound these pass in bf16 and f16 (the first rows of a causal
// output see one key each, so max|ref| is a whole value, and its rounding and naive error hide
// the 1e-3-sized errors of the last rows); the per-row bound (judge.hpp) fails them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"

namespace fastattn::testing {
namespace {

using harness::CaseData;
using harness::TensorCheck;

enum class Fault { none, skips_last_16_keys, scale_1_percent_off };

const char* name(Fault f) {
  switch (f) {
    case Fault::none: return "none";
    case Fault::skips_last_16_keys: return "skips_last_16_keys";
    default: return "scale_1_percent_off";
  }
}

// The problem a faulty kernel effectively solves: the same tensors with the fault applied.
AttentionProblem faulty(AttentionProblem p, Fault f) {
  if (f == Fault::skips_last_16_keys) {
    // Causal, sq = sk: row i sees keys 0..i. Reading only the first sk - 16 keys keeps that
    // diagonal (top-left alignment) and drops keys sk-16..sk-1 from the rows that see them.
    p.seqlen_k -= 16;
    p.total_k -= 16;
    p.alignment = MaskAlignment::top_left;
  } else if (f == Fault::scale_1_percent_off) {
    p.softmax_scale *= 1.01f;
  }
  return p;
}

class JudgeCatches : public ::testing::TestWithParam<std::tuple<DType, Fault>> {
 protected:
  static std::string case_text(DType dtype) {
    return std::string("b=1 sq=1000 sk=1000 h=2 hkv=1 d=64 dtype=") + to_string(dtype) +
           " mask=causal seed=3";
  }
};

// out of the faulty forward (f = none: the rounded oracle) judged against float64.
TEST_P(JudgeCatches, FaultyForward) {
  const auto [dtype, fault] = GetParam();
  CaseData data(harness::parse_case(case_text(dtype)));
  const AttentionProblem p = data.problem();
  const reference::ForwardResult ref = reference::forward_f64(p);
  const harness::NaiveForward naive = harness::naive_forward(p);
  const reference::ForwardResult bad = reference::forward_f64(faulty(p, fault));
  data.set_forward_outputs(bad.out, ref.lse);  // a correct lse: only out is judged here
  const TensorCheck t = harness::judge_tensor("out", data.out, data.out.values(), ref.out, naive.out,
                                              naive.out_terms, dtype, p.head_dim, false);
  if (fault == Fault::none) {
    EXPECT_TRUE(t.pass) << t.to_string();
  } else {
    EXPECT_FALSE(t.pass) << name(fault) << " passed the judge: " << t.to_string();
  }
}

// dq, dk, dv of the faulty backward: each tensor the fault changes must fail.
TEST_P(JudgeCatches, FaultyBackward) {
  const auto [dtype, fault] = GetParam();
  CaseData data(harness::parse_case(case_text(dtype)));
  const reference::ForwardResult fwd = reference::forward_f64(data.problem());
  data.set_forward_outputs(fwd.out, fwd.lse);
  const AttentionProblem p = data.problem();
  const reference::BackwardResult ref = reference::backward_f64(p);
  const harness::NaiveBackward naive = harness::naive_backward(p);
  reference::BackwardResult bad = reference::backward_f64(faulty(p, fault));
  bad.dk.resize(ref.dk.size(), 0.0);  // the skipped keys get zero gradients
  bad.dv.resize(ref.dv.size(), 0.0);
  struct Tensor {
    const char* name;
    harness::HostTensor* host;
    const std::vector<double>& bad;
    const std::vector<double>& ref;
    const std::vector<double>& naive;
    const std::vector<double>& terms;
  };
  const Tensor tensors[] = {{"dq", &data.dq, bad.dq, ref.dq, naive.dq, naive.dq_terms},
                            {"dk", &data.dk, bad.dk, ref.dk, naive.dk, naive.dk_terms},
                            {"dv", &data.dv, bad.dv, ref.dv, naive.dv, naive.dv_terms}};
  for (const Tensor& x : tensors) {
    for (std::int64_t i = 0; i < x.host->numel(); ++i) x.host->set(i, x.bad[static_cast<std::size_t>(i)]);
    const TensorCheck t = harness::judge_tensor(x.name, *x.host, x.host->values(), x.ref, x.naive,
                                                x.terms, dtype, p.head_dim, false);
    if (fault == Fault::none) {
      EXPECT_TRUE(t.pass) << t.to_string();
    } else {
      EXPECT_FALSE(t.pass) << name(fault) << " passed the judge: " << t.to_string();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Faults, JudgeCatches,
    ::testing::Combine(::testing::Values(DType::bf16, DType::f16),
                       ::testing::Values(Fault::none, Fault::skips_last_16_keys,
                                         Fault::scale_1_percent_off)),
    [](const ::testing::TestParamInfo<std::tuple<DType, Fault>>& p) {
      return std::string(to_string(std::get<0>(p.param))) + "_" + name(std::get<1>(p.param));
    });

}  // namespace
}  // namespace fastattn::testing
