// gpu_sm90_support.hpp — what the sm90 forward GPU tests share (gpu_sm90_test.cpp against
// float64, gpu_sm90_bits_test.cpp the settings that must give the same bits): the CudaSm90
// fixture (skips unless the device takes the sm90 path; the built sm90 head dims), the float64
// check that also asserts the sm90 kernel ran, and random bf16 inputs.
#pragma once

#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/flash_fwd_sm90/plan.hpp"
#include "harness/harness.hpp"
#include "test_support.hpp"

#ifndef ASSERT_CUDA
#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call
#endif

namespace fastattn::testing {

inline harness::CheckOptions forward_only() {
  harness::CheckOptions o;
  o.backward = false;
  return o;
}

class CudaSm90 : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    const BuildInfo info = build_info();
    if (const std::string why = sm90_path_missing(info); !why.empty()) GTEST_SKIP() << why;
    // The sm90 kernel's head dims from the plan itself (flash_fwd_sm90/plan.hpp), so the tests'
    // list cannot drift from it.
    dims_ = built_head_dims(info, [](int d) { return cuda::sm90_has_head_dim(d); });
    if (dims_.empty()) GTEST_SKIP() << "no sm90 head dim in this build";
  }
  std::vector<int> dims_;
};

inline void expect_sm90(const std::string& text) {
  const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
  EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  EXPECT_EQ(r.forward_choice.isa, "sm90") << text << "\n" << r.forward_choice.describe();
  EXPECT_NE(r.forward_choice.kernel.find("cuda.forward.sm90."), std::string::npos) << r.forward_choice.describe();
}

// A varlen call: on the sm90 kernels while kSm90Varlen (plan.hpp), else on sm80 with the reason.
inline void expect_varlen(const std::string& text) {
  if (cuda::kSm90Varlen) return expect_sm90(text);
  const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
  EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  EXPECT_NE(r.forward_choice.reason.find("kSm90Varlen"), std::string::npos) << r.forward_choice.describe();
}

inline std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) {
    float f = normal(rng);
    if (f == 0.0f) f = 0.5f;
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    x = static_cast<std::uint16_t>(bits >> 16);
  }
  return v;
}

}  // namespace fastattn::testing
