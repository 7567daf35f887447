// gradcheck_test.cpp — gradients against central finite differences, in float64, on tiny shapes.
//
// The loss is L = sum(dout * out); its gradients with respect to q, k, v are exactly what
// backward computes for that dout. Inputs are f32 and the step h = 2^-11 is exact for values
// of magnitude < 2^12, so (L(x + h) - L(x - h)) / 2h uses exactly the intended perturbation.
// Truncation error is O(h^2) ~ 1e-7; float64 rounding in L is ~1e-12.
// The CPU backend's backward is then checked against the (now verified) reference on the same
// tiny cases, through the harness.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using harness::Case;
using harness::CaseData;
using harness::HostTensor;

double loss(const CaseData& data) {
  const reference::ForwardResult f = reference::forward_f64(data.problem());
  const std::vector<double> dout = data.dout.values();  // same [token, head, dim] order as out
  double l = 0.0;
  for (std::size_t i = 0; i < dout.size(); ++i) l += dout[i] * f.out[i];
  return l;
}

// Max |analytic - numeric| / (1 + |analytic|) over every element of `x`.
double worst_gradient_error(CaseData& data, HostTensor& x, const std::vector<double>& analytic,
                            std::string* where) {
  const double h = 0x1.0p-11;
  double worst = 0.0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double x0 = x.get(i);
    x.set(i, x0 + h);
    const double up = loss(data);
    x.set(i, x0 - h);
    const double down = loss(data);
    x.set(i, x0);
    const double numeric = (up - down) / (2.0 * h);
    const double a = analytic[static_cast<std::size_t>(i)];
    const double err = std::fabs(a - numeric) / (1.0 + std::fabs(a));
    if (err > worst) {
      worst = err;
      *where = "element " + std::to_string(i) + ": analytic " + std::to_string(a) + ", numeric " +
               std::to_string(numeric);
    }
  }
  return worst;
}

// Tiny cases covering every option: masks in both alignments, soft-cap, GQA/MQA, varlen with
// empty and length-1 sequences, fully masked rows, strided layouts, scale.
const char* const kTinyCases[] = {
    "b=1 sq=3 sk=4 h=1 hkv=1 d=8 dtype=f32 mask=none seed=1",
    "b=2 sq=5 sk=3 h=2 hkv=1 d=8 dtype=f32 mask=causal align=bottom_right seed=2",
    "b=1 sq=4 sk=6 h=2 hkv=2 d=8 dtype=f32 mask=causal align=top_left seed=3",
    "b=1 sq=6 sk=6 h=4 hkv=2 d=16 dtype=f32 mask=window wl=1 wr=2 seed=4",
    "b=1 sq=5 sk=7 h=2 hkv=1 d=8 dtype=f32 mask=causal wl=2 softcap=2 seed=5",
    "b=1 sq=4 sk=5 h=1 hkv=1 d=8 dtype=f32 mask=none softcap=1 scale=0.7 seed=6",
    "lens_q=3,0,1,2 lens_k=2,3,4,0 h=2 hkv=1 d=8 dtype=f32 mask=causal seed=7",
    "b=1 sq=4 sk=3 h=2 hkv=1 d=8 dtype=f32 mask=window wl=0 wr=0 layout=strided seed=8",
    "b=1 sq=3 sk=3 h=1 hkv=1 d=8 dtype=f32 mask=none qk_std=2 seed=9",
};

class GradCheck : public ::testing::TestWithParam<const char*> {};

TEST_P(GradCheck, ReferenceMatchesFiniteDifferences) {
  const Case c = harness::parse_case(GetParam());
  CaseData data(c);
  const reference::BackwardResult g = reference::backward_f64(data.problem());
  std::string where;
  EXPECT_LT(worst_gradient_error(data, data.q, g.dq, &where), 1e-6) << "dq " << where;
  EXPECT_LT(worst_gradient_error(data, data.k, g.dk, &where), 1e-6) << "dk " << where;
  EXPECT_LT(worst_gradient_error(data, data.v, g.dv, &where), 1e-6) << "dv " << where;
}

TEST_P(GradCheck, CpuMatchesReference) {
  expect_pass(harness::check_case(harness::parse_case(GetParam()), Backend::cpu));
}

TEST_P(GradCheck, CpuMatchesReferenceInHalfPrecision) {
  for (DType dtype : {DType::f16, DType::bf16}) {
    Case c = harness::parse_case(GetParam());
    c.dtype = dtype;
    expect_pass(harness::check_case(c, Backend::cpu));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, GradCheck, ::testing::ValuesIn(kTinyCases));

}  // namespace
}  // namespace fastattn::testing
