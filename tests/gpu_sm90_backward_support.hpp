// gpu_sm90_backward_support.hpp — what the Hopper backward's GPU tests share
// (gpu_sm90_backward_test.cpp, gpu_sm90_backward_varlen_dims_test.cpp): the fixture, which skips
// unless the device's path is sm90 and opts in with FASTATTN_CUDA_BWD_SM90=1, and the two
// checks: a case against float64 on the sm90 backward, and deterministic mode's bits over 10
// runs. Outside an anonymous namespace, as gpu_sm90_support.hpp's: gtest wants one fixture type
// per suite name across the test binary's files.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/flash_bwd_sm90/plan.hpp"
#include "harness/harness.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {

class CudaSm90Backward : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const BuildInfo info = build_info();
    if (const std::string why = sm90_path_missing(info); !why.empty()) GTEST_SKIP() << why;
    dims_ = built_head_dims(info, {64, 128});
    if (dims_.empty()) GTEST_SKIP() << "no sm90 head dim (64, 128) in this build";
    opt_in_.emplace("FASTATTN_CUDA_BWD_SM90", std::string("1"));
  }
  // dims_ and the built d = 96 / 256 that kSm90BackwardHeadDims serves (the varlen tests).
  std::vector<int> all_dims() const {
    std::vector<int> dims = dims_;
    for (int d : build_info().cuda_head_dims) {
      if ((d == 96 || d == 256) && cuda::sm90_backward_has_head_dim(d)) dims.push_back(d);
    }
    return dims;
  }
  std::vector<int> dims_;
  std::optional<ScopedEnv> opt_in_;
};

inline void expect_sm90_backward(const std::string& text) {
  const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda);
  EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  EXPECT_EQ(r.backward_choice.isa, "sm90") << text << "\n" << r.backward_choice.describe();
  EXPECT_NE(r.backward_choice.kernel.find("cuda.backward.sm90."), std::string::npos) << r.backward_choice.describe();
}

// Deterministic mode's promise: the backward of `text` (run after expect_sm90_backward) gives
// the same dq/dk/dv bits in 10 runs; `label` prefixes the failure message.
inline void expect_bitwise_repeatable(const std::string& text, const std::string& label) {
  harness::CaseData data(harness::parse_case(text));
  const reference::ForwardResult ref = reference::forward_f64(data.problem());
  data.set_forward_outputs(ref.out, ref.lse);
  data.run_backward(Backend::cuda);
  const std::vector<std::uint8_t> dq0 = data.dq.snapshot(), dk0 = data.dk.snapshot(), dv0 = data.dv.snapshot();
  for (int run = 1; run < 10; ++run) {
    data.run_backward(Backend::cuda);
    EXPECT_TRUE(dq0 == data.dq.snapshot() && dk0 == data.dk.snapshot() && dv0 == data.dv.snapshot())
        << label << text << ": run " << run << " differs from run 0";
  }
}

}  // namespace fastattn::testing
