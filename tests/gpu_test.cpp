// gpu_test.cpp — tests of the CUDA backend (ctest label `gpu`).
//
// Every test derives from GpuTest, which skips unless fastattn was built with CUDA and a device
// is present, so this executable builds and passes on CPU-only machines. Cases run on device
// copies of harness tensors (harness/device_mirror.hpp) and are judged by the same rule as the
// CPU backend: error vs float64 <= 2 x the naive same-precision error + floor, every output
// written, padding and inputs untouched, empty rows 0 / -inf.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
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

// With FASTATTN_CUDA_PATH=sm70 / sm75 (ctest gpu_forward_sm70 / gpu_forward_sm75), only what
// those paths serve: f16, and head_dim <= 128 on sm70 (src/cuda/forward_path.hpp).
harness::CaseLimits cuda_limits() {
  harness::CaseLimits limits;
  limits.dtypes = {DType::f16, DType::bf16};
  if (lowres_path_forced()) limits.dtypes = {DType::f16};  // test_support.hpp
  for (int d : build_info().cuda_head_dims) {
    if (forced_path_serves(d, false)) limits.head_dims.push_back(d);
  }
  limits.allow_strided = false;  // the kernels need 16-byte aligned rows (strided: unaligned base)
  limits.allow_long = true;
  return limits;
}

TEST_F(CudaBackend, BuildReportsCuda) {
  const BuildInfo info = build_info();
  EXPECT_TRUE(info.cuda_compiled);
  EXPECT_FALSE(info.cuda_archs_compiled.empty()) << "a CUDA build names the archs it compiled";
  EXPECT_FALSE(info.cuda_head_dims.empty());
  ASSERT_FALSE(info.cuda_paths_compiled.empty());
  // The sm80 units are built exactly when FASTATTN_CUDA_ARCHS has an architecture >= 80 (a T4
  // build, "75", has the sm75 path alone).
  bool arch_80_or_newer = false;
  for (const std::string& arch : info.cuda_archs_compiled) arch_80_or_newer |= std::atoi(arch.c_str() + 2) >= 80;
  const auto& paths = info.cuda_paths_compiled;
  EXPECT_EQ(std::find(paths.begin(), paths.end(), "sm80") != paths.end(), arch_80_or_newer);
  // One path (or the reason there is none) per device; an H100/H200 takes sm90 when the build
  // has its units (FASTATTN_CUDA_ARCHS with 90), else sm80, unless forced.
  EXPECT_EQ(info.cuda_device_paths.size(), info.cuda_devices.size());
  const bool sm90_built = std::find(paths.begin(), paths.end(), "sm90") != paths.end();
  if (std::getenv("FASTATTN_CUDA_PATH") == nullptr) {
    for (std::size_t i = 0; i < info.cuda_device_paths.size(); ++i) {
      const bool hopper = info.cuda_devices[i].find("(sm90,") != std::string::npos;
      EXPECT_EQ(info.cuda_device_paths[i],
                !arch_80_or_newer ? "sm80; not in this build" : sm90_built && hopper ? "sm90" : "sm80");
    }
  }
}

// Under FASTATTN_CUDA_PATH (ctest gpu_forward_sm70 / _sm75): why the forced path cannot run
// here (a build without its units, or a GPU too old for it), or "" when it can.
std::string forced_path_unavailable() {
  if (std::getenv("FASTATTN_CUDA_PATH") == nullptr) return "";
  const std::string d = std::to_string(build_info().cuda_head_dims.front());
  const harness::CheckReport r = harness::check_case(
      harness::parse_case("b=1 sq=8 sk=8 h=1 hkv=1 d=" + d + " dtype=f16 mask=none"), Backend::cuda, forward_only());
  const bool missing = r.error.find("FASTATTN_CUDA_LOWRES_PATHS") != std::string::npos ||
                       r.error.find("compute capability") != std::string::npos;
  return missing ? r.error : "";
}

TEST_F(CudaBackend, RandomForwardCasesMatchFloat64) {
  if (const std::string why = forced_path_unavailable(); !why.empty()) GTEST_SKIP() << why;
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
    if (!forced_path_serves(d, false)) continue;
    const std::string hd = " d=" + std::to_string(d);
    cases.push_back("b=1 sq=1000 sk=1000 h=2 hkv=1" + hd + " dtype=bf16 mask=causal");
    cases.push_back("b=2 sq=65 sk=300 h=4 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
    cases.push_back("b=2 sq=300 sk=65 h=4 hkv=4" + hd + " dtype=bf16 mask=causal align=top_left");
    cases.push_back("b=1 sq=257 sk=513 h=3 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    cases.push_back("b=1 sq=1 sk=777 h=8 hkv=2" + hd + " dtype=f16 mask=none");
    cases.push_back("b=3 sq=7 sk=7 h=2 hkv=2" + hd + " dtype=bf16 mask=none lens_q=0,7,1 lens_k=5,0,9");
    cases.push_back("b=1 sq=200 sk=333 h=2 hkv=1" + hd + " dtype=bf16 mask=causal scale=-0.09");
  }
  for (const std::string& text : cases) {
    const harness::Case c = harness::parse_case(for_forced_path(text));
    const harness::CheckReport r = harness::check_case(c, Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
  }
}

// ---- split-KV forward (flash_fwd/kernel*.cuh split mode + combine.cuh) ----------------------

// FASTATTN_CUDA_NUM_SPLITS, set for one scope (flash_fwd/heuristics.hpp reads it on every call).
ScopedEnv force_splits(int n) { return ScopedEnv("FASTATTN_CUDA_NUM_SPLITS", std::to_string(n)); }

void expect_split_pass(const harness::CheckReport& r, int splits, const std::string& what) {
  EXPECT_TRUE(r.pass) << what << " splits=" << splits << "\n" << r.to_string();
  if (splits > 1) {
    EXPECT_NE(r.forward_choice.kernel.find(".splitkv" + std::to_string(splits)), std::string::npos)
        << r.forward_choice.describe();
  }
}

// Random cases (every mask, GQA/MQA, varlen with empty sequences, soft-cap, seqlen 1..1000)
// with forced split counts, including more splits than key tiles (empty splits).
TEST_F(CudaBackend, ForcedSplitKvRandomCasesMatchFloat64) {
  if (const std::string why = forced_path_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const harness::CaseLimits limits = cuda_limits();
  const int splits[] = {2, 3, 5, 16, 128};
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    const int n = splits[seed % 5];
    const ScopedEnv env = force_splits(n);
    const harness::Case c = harness::random_case(1000 + seed, limits);
    expect_split_pass(harness::check_case(c, Backend::cuda, forward_only()), n, "seed " + std::to_string(1000 + seed));
  }
}

// Short queries (the 16-row kernel) against long keys, and the main kernel's split mode.
TEST_F(CudaBackend, ForcedSplitKvChosenCasesMatchFloat64) {
  struct Forced {
    std::string text;
    int splits;
  };
  std::vector<Forced> cases;
  for (int d : build_info().cuda_head_dims) {
    if (!forced_path_serves(d, false)) continue;
    const std::string hd = " d=" + std::to_string(d);
    cases.push_back({"b=1 sq=1 sk=20000 h=4 hkv=4" + hd + " dtype=bf16 mask=none", 7});
    cases.push_back({"b=2 sq=16 sk=3001 h=8 hkv=2" + hd + " dtype=f16 mask=causal", 13});
    cases.push_back({"b=1 sq=5 sk=4099 h=2 hkv=1" + hd + " dtype=bf16 mask=window wl=300 wr=0", 9});
    cases.push_back({"b=1 sq=16 sk=2048 h=2 hkv=2" + hd + " dtype=bf16 mask=causal align=top_left softcap=30", 4});
    cases.push_back({"b=1 sq=9 sk=1500 h=4 hkv=1" + hd + " dtype=f16 mask=none qk_std=4", 128});
    cases.push_back({"b=4 sq=1 sk=1 h=4 hkv=2" + hd + " dtype=bf16 mask=none lens_q=1,0,16,3 lens_k=4000,7,0,1", 6});
    cases.push_back({"b=1 sq=300 sk=5000 h=2 hkv=1" + hd + " dtype=bf16 mask=causal", 5});
    cases.push_back({"b=2 sq=130 sk=2000 h=3 hkv=3" + hd + " dtype=f16 mask=window wl=100 wr=50 align=top_left", 3});
    cases.push_back({"b=3 sq=1 sk=1 h=2 hkv=1" + hd + " dtype=bf16 mask=causal lens_q=200,0,40 lens_k=3000,10,0", 8});
  }
  for (const Forced& f : cases) {
    const ScopedEnv env = force_splits(f.splits);
    const harness::Case c = harness::parse_case(for_forced_path(f.text));
    expect_split_pass(harness::check_case(c, Backend::cuda, forward_only()), f.splits, f.text);
  }
}

// Decode shapes with no forcing: the heuristic must choose the 16-row kernel and split.
TEST_F(CudaBackend, DecodeShapesSplitByHeuristicMatchFloat64) {
  if (lowres_path_forced()) GTEST_SKIP() << "the sm75 / sm70 paths have no 16-row decode kernel";
  const ScopedEnv env("FASTATTN_CUDA_NUM_SPLITS", std::nullopt);
  for (int d : build_info().cuda_head_dims) {
    const std::string hd = " d=" + std::to_string(d);
    for (const std::string& text : {"b=1 sq=1 sk=16384 h=32 hkv=32" + hd + " dtype=bf16 mask=none",
                                   "b=1 sq=16 sk=8192 h=8 hkv=8" + hd + " dtype=bf16 mask=causal",
                                   "b=2 sq=4 sk=10000 h=8 hkv=2" + hd + " dtype=f16 mask=none"}) {
      const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
      EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
      EXPECT_NE(r.forward_choice.kernel.find(".q16.splitkv"), std::string::npos) << r.forward_choice.describe();
      EXPECT_GT(r.forward_choice.workspace_bytes, 0u);
    }
  }
}


// GQA decode: padded decode calls run on the KV-cache kernel (src/cuda/inference,
// flash_fwd/heuristics.hpp: forward_uses_kv_cache_kernel), which packs the query heads of a KV
// head as rows (kernel name ".gqaN") whatever the mask: a window or a top-left causal mask is
// applied per query token there. Odd group sizes (7), groups above 16 rows (32), soft-cap,
// forced splits. (The harness's strided layout has rows the CUDA
// kernels refuse, 16-byte alignment; the packed strides are checked on the CPU, in
// cuda_forward_plan_test.cpp.)
TEST_F(CudaBackend, GqaDecodePacksQueryHeadsAndMatchesFloat64) {
  if (lowres_path_forced()) GTEST_SKIP() << "the sm75 / sm70 paths: covered by the random cases";
  struct Decode {
    std::string text;
    int group;  // expected packing, 1: none
  };
  for (int d : build_info().cuda_head_dims) {
    const std::string hd = " d=" + std::to_string(d);
    const Decode cases[] = {
        {"b=3 sq=1 sk=5000 h=32 hkv=8" + hd + " dtype=bf16 mask=causal", 4},
        {"b=2 sq=1 sk=777 h=14 hkv=2" + hd + " dtype=f16 mask=none", 7},
        {"b=1 sq=1 sk=3001 h=64 hkv=2" + hd + " dtype=bf16 mask=causal", 32},
        {"b=1 sq=1 sk=4097 h=16 hkv=4" + hd + " dtype=bf16 mask=causal softcap=30", 4},
        {"b=2 sq=1 sk=1000 h=8 hkv=2" + hd + " dtype=f16 mask=none", 4},
        {"b=1 sq=1 sk=1 h=8 hkv=1" + hd + " dtype=bf16 mask=causal", 8},
        {"b=2 sq=1 sk=300 h=8 hkv=2" + hd + " dtype=bf16 mask=causal align=top_left", 4},
        {"b=2 sq=1 sk=2000 h=8 hkv=1" + hd + " dtype=bf16 mask=window wl=50 wr=0", 8},
    };
    for (const Decode& c : cases) {
      const harness::CheckReport r = harness::check_case(harness::parse_case(c.text), Backend::cuda, forward_only());
      EXPECT_TRUE(r.pass) << c.text << "\n" << r.to_string();
      const bool packed = r.forward_choice.kernel.find(".gqa" + std::to_string(c.group)) != std::string::npos;
      EXPECT_EQ(packed, c.group > 1) << c.text << ": " << r.forward_choice.describe();
    }
    const ScopedEnv splits = force_splits(5);
    const std::string forced = "b=2 sq=1 sk=9000 h=32 hkv=8" + hd + " dtype=bf16 mask=causal";
    expect_split_pass(harness::check_case(harness::parse_case(forced), Backend::cuda, forward_only()), 5, forced);
  }
}

}  // namespace
}  // namespace fastattn::testing
