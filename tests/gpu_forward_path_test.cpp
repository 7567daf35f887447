// gpu_forward_path_test.cpp — the Volta (sm70) and Turing (sm75) forward paths, forced with
// FASTATTN_CUDA_PATH on whatever GPU runs the suite (ctest label `gpu`), so an H100/H200 checks
// them (src/cuda/forward_path.hpp, docs/low-resource-gpus.md).
//
// Each test sets FASTATTN_CUDA_PATH to its parameter for its own scope. A build without a
// path's units (CMake FASTATTN_CUDA_LOWRES_PATHS) skips that path's tests. The ctest entries
// gpu_forward_sm70 / gpu_forward_sm75 (tests/CMakeLists.txt) also run the random forward
// suites of gpu_test.cpp with the variable set for the whole process: cuda_limits() there keeps
// to what the forced path serves (f16; sm70: head_dim <= 128).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/harness.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

harness::CheckOptions forward_only() {
  harness::CheckOptions o;
  o.backward = false;
  return o;
}

class CudaForwardPath : public GpuTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    env_.emplace("FASTATTN_CUDA_PATH", GetParam());
    // Probe: a build without this path's units says so (dispatch.cpp), and the path is skipped.
    const std::string d = std::to_string(build_info().cuda_head_dims.front());
    const harness::CheckReport r = harness::check_case(
        harness::parse_case("b=1 sq=8 sk=8 h=1 hkv=1 d=" + d + " dtype=f16 mask=none"), Backend::cuda, forward_only());
    if (r.error.find("FASTATTN_CUDA_LOWRES_PATHS") != std::string::npos) {
      GTEST_SKIP() << "this build has no " << GetParam() << " forward units: " << r.error;
    }
    if (r.error.find("no CUDA device") != std::string::npos || r.error.find("compute capability") != std::string::npos) {
      GTEST_SKIP() << r.error;
    }
  }
  void TearDown() override { env_.reset(); }

  bool sm70() const { return GetParam() == "sm70"; }
  std::vector<int> head_dims() const {
    std::vector<int> dims;
    for (int d : build_info().cuda_head_dims) {
      if (!sm70() || d <= 128) dims.push_back(d);
    }
    return dims;
  }
  harness::CaseLimits limits() const {
    harness::CaseLimits l;
    l.dtypes = {DType::f16};
    for (int d : head_dims()) l.head_dims.push_back(d);
    l.allow_strided = false;  // 16-byte aligned rows
    l.allow_long = true;
    return l;
  }
  void expect_pass(const std::string& text, int splits = 0) {
    std::optional<ScopedEnv> forced;
    if (splits > 0) forced.emplace("FASTATTN_CUDA_NUM_SPLITS", std::to_string(splits));
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << GetParam() << ": " << text << "\n" << r.to_string();
    if (r.error.empty()) expect_path(r.forward_choice);
  }
  void expect_path(const KernelChoice& c) {
    EXPECT_EQ(c.isa, GetParam()) << c.describe();
    EXPECT_NE(c.kernel.find("cuda.forward." + GetParam() + ".f16."), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find(GetParam() + " path"), std::string::npos) << c.describe();
    EXPECT_NE(c.reason.find("forced by FASTATTN_CUDA_PATH"), std::string::npos) << c.describe();
  }

 private:
  std::optional<ScopedEnv> env_;
};

// Every mask, GQA/MQA, varlen with empty sequences, soft-cap, seqlen 1..1000, f16.
TEST_P(CudaForwardPath, RandomF16CasesMatchFloat64) {
  const harness::CaseLimits l = limits();
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const harness::Case c = harness::random_case(seed, l);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << GetParam() << " seed " << seed << "\n" << r.to_string();
  }
}

TEST_P(CudaForwardPath, ChosenCasesMatchFloat64) {
  for (int d : head_dims()) {
    const std::string hd = " d=" + std::to_string(d);
    expect_pass("b=1 sq=1000 sk=1000 h=2 hkv=1" + hd + " dtype=f16 mask=causal");
    expect_pass("b=2 sq=65 sk=300 h=4 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
    expect_pass("b=2 sq=300 sk=65 h=4 hkv=4" + hd + " dtype=f16 mask=causal align=top_left");
    expect_pass("b=1 sq=257 sk=513 h=3 hkv=1" + hd + " dtype=f16 mask=window wl=40 wr=7 softcap=30");
    expect_pass("b=1 sq=1 sk=777 h=8 hkv=2" + hd + " dtype=f16 mask=none");  // no short-query kernel here
    expect_pass("b=3 sq=7 sk=7 h=2 hkv=2" + hd + " dtype=f16 mask=none lens_q=0,7,1 lens_k=5,0,9");
    expect_pass("b=1 sq=200 sk=333 h=2 hkv=1" + hd + " dtype=f16 mask=causal scale=-0.09");
    expect_pass("b=1 sq=129 sk=4099 h=2 hkv=2" + hd + " dtype=f16 mask=none qk_std=4");
  }
}

// Split-KV on the path's main kernel (its epilogue writes the f32 partials).
TEST_P(CudaForwardPath, ForcedSplitKvMatchesFloat64) {
  for (int d : head_dims()) {
    const std::string hd = " d=" + std::to_string(d);
    expect_pass("b=1 sq=1 sk=20000 h=4 hkv=4" + hd + " dtype=f16 mask=none", 7);
    expect_pass("b=2 sq=16 sk=3001 h=8 hkv=2" + hd + " dtype=f16 mask=causal", 13);
    expect_pass("b=1 sq=300 sk=5000 h=2 hkv=1" + hd + " dtype=f16 mask=causal", 5);
    expect_pass("b=3 sq=1 sk=1 h=2 hkv=1" + hd + " dtype=f16 mask=causal lens_q=200,0,40 lens_k=3000,10,0", 8);
  }
}

// bf16 has no MMA before sm80: an `unsupported` error naming the dtype and the path.
TEST_P(CudaForwardPath, Bf16IsUnsupported) {
  const harness::CheckReport r = harness::check_case(
      harness::parse_case("b=1 sq=64 sk=64 h=1 hkv=1 d=" + std::to_string(head_dims().front()) +
                          " dtype=bf16 mask=none"),
      Backend::cuda, forward_only());
  EXPECT_FALSE(r.pass);
  EXPECT_NE(r.error.find("the " + GetParam() + " path"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("got dtype bf16"), std::string::npos) << r.error;
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaForwardPath, ::testing::Values(std::string("sm75"), std::string("sm70")),
                         [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; });

}  // namespace
}  // namespace fastattn::testing
