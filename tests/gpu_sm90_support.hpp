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

// A call that matches float64 on the sm90 path, on a tile whose KernelChoice::reason names
// `tile` (e.g. "narrow tile") exactly when `taken`.
inline void expect_sm90_tile(const std::string& text, const char* tile, bool taken) {
  const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
  EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  EXPECT_EQ(r.forward_choice.isa, "sm90") << text << "\n" << r.forward_choice.describe();
  EXPECT_EQ(r.forward_choice.reason.find(tile) != std::string::npos, taken)
      << text << "\n" << r.forward_choice.describe();
}

// Causal calls that a tile for causal calls (d = 64's narrow one, d = 128's short one) serves:
// both alignments with rows that see no key, seqlen 17 / 1023 / 4097, GQA 7:1, large logits.
// `t`: the head dim and dtype (" d=64 dtype=bf16").
inline std::vector<std::string> causal_tile_cases(const std::string& t) {
  return {"b=2 sq=17 sk=17 h=3 hkv=3" + t + " mask=causal",
          "b=1 sq=17 sk=5 h=2 hkv=2" + t + " mask=causal",  // rows that see no key
          "b=1 sq=1023 sk=1023 h=2 hkv=1" + t + " mask=causal",
          "b=1 sq=4097 sk=4097 h=1 hkv=1" + t + " mask=causal",
          "b=2 sq=300 sk=65 h=2 hkv=2" + t + " mask=causal align=bottom_right",
          "b=2 sq=300 sk=65 h=2 hkv=1" + t + " mask=causal align=top_left",
          "b=1 sq=129 sk=700 h=2 hkv=2" + t + " mask=causal align=top_left",
          "b=2 sq=200 sk=333 h=7 hkv=1" + t + " mask=causal",  // GQA 7:1
          "b=1 sq=129 sk=1000 h=2 hkv=2" + t + " mask=causal qk_std=4"};
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
