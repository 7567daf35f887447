// gpu_test.cpp — tests of the CUDA backend (ctest label `gpu`).
//
// Every test derives from GpuTest, which skips unless fastattn was built with CUDA and a device
// is present, so this executable builds and passes on CPU-only machines. Cases run on device
// copies of harness tensors (harness/device_mirror.hpp) and are judged by the same rule as the
// CPU backend: error vs float64 <= 2 x the naive same-precision error + floor, every output
// written, padding and inputs untouched, empty rows 0 / -inf.
#include <gtest/gtest.h>

#include <vector>

#include "harness/harness.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

class CudaBackend : public GpuTest {};

harness::CheckOptions forward_only() {
  harness::CheckOptions o;
  o.backward = false;
  return o;
}

harness::CaseLimits cuda_limits() {
  harness::CaseLimits limits;
  limits.dtypes = {DType::f16, DType::bf16};
  for (int d : build_info().cuda_head_dims) limits.head_dims.push_back(d);
  limits.allow_strided = false;  // the kernels need 16-byte aligned rows (strided: unaligned base)
  limits.allow_long = true;
  return limits;
}

TEST_F(CudaBackend, BuildReportsCuda) {
  const BuildInfo info = build_info();
  EXPECT_TRUE(info.cuda_compiled);
  EXPECT_FALSE(info.cuda_archs_compiled.empty()) << "a CUDA build names the archs it compiled";
  EXPECT_FALSE(info.cuda_head_dims.empty());
}

TEST_F(CudaBackend, RandomForwardCasesMatchFloat64) {
  const harness::CaseLimits limits = cuda_limits();
  for (std::uint64_t seed = 1; seed <= 60; ++seed) {
    const harness::Case c = harness::random_case(seed, limits);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << r.to_string();
  }
}

TEST_F(CudaBackend, ChosenForwardCasesMatchFloat64) {
  std::vector<std::string> cases;
  for (int d : build_info().cuda_head_dims) {
    const std::string hd = " d=" + std::to_string(d);
    cases.push_back("b=1 sq=1000 sk=1000 h=2 hkv=1" + hd + " dtype=bf16 mask=causal");
    cases.push_back("b=2 sq=65 sk=300 h=4 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
    cases.push_back("b=2 sq=300 sk=65 h=4 hkv=4" + hd + " dtype=bf16 mask=causal align=top_left");
    cases.push_back("b=1 sq=257 sk=513 h=3 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    cases.push_back("b=1 sq=1 sk=777 h=8 hkv=2" + hd + " dtype=f16 mask=none");
    cases.push_back("b=3 sq=7 sk=7 h=2 hkv=2" + hd + " dtype=bf16 mask=none lens_q=0,7,1 lens_k=5,0,9");
  }
  for (const std::string& text : cases) {
    const harness::Case c = harness::parse_case(text);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  }
}

}  // namespace
}  // namespace fastattn::testing
