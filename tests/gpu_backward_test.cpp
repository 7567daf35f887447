// gpu_backward_test.cpp — the CUDA backward against float64 (ctest label `gpu`).
//
// Same harness and rule as the CPU backend: dq, dk, dv within 2 x the naive same-precision
// error of the float64 gradients plus a floor, poisoned outputs fully written, inputs untouched.
// The harness draws `deterministic` at random, so both dQ paths (atomics, split buffers) run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness/device_mirror.hpp"
#include "harness/harness.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

class CudaBackward : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped() || !lowres_path_forced()) return;
    // Probe: a build without the forced path's units says so (dispatch.cpp); the suite is skipped.
    const harness::CheckReport r = harness::check_case(
        harness::parse_case("b=1 sq=8 sk=8 h=1 hkv=1 d=" + std::to_string(build_info().cuda_head_dims.front()) +
                            " dtype=f16 mask=none"),
        Backend::cuda);
    if (r.error.find("FASTATTN_CUDA_LOWRES_PATHS") != std::string::npos) {
      GTEST_SKIP() << "this build has no units for the forced path: " << r.error;
    }
  }
};
// The head dims of this build that the (forced) path's backward serves (test_support.hpp).
std::vector<int> backward_head_dims() {
  std::vector<int> dims;
  for (int d : build_info().cuda_head_dims) {
    if (forced_path_serves(d, true)) dims.push_back(d);
  }
  return dims;
}

harness::CaseLimits backward_limits() {
  harness::CaseLimits limits;
  limits.dtypes = {DType::f16, DType::bf16};
  if (lowres_path_forced()) limits.dtypes = {DType::f16};
  for (int d : backward_head_dims()) limits.head_dims.push_back(d);
  limits.allow_strided = false;  // the kernels need 16-byte aligned rows
  limits.allow_long = true;
  return limits;
}

TEST_F(CudaBackward, RandomCasesMatchFloat64) {
  const harness::CaseLimits limits = backward_limits();
  for (std::uint64_t seed = 101; seed <= 160; ++seed) {
    const harness::Case c = harness::random_case(seed, limits);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda);
    EXPECT_TRUE(r.pass) << r.to_string();
  }
}

TEST_F(CudaBackward, ChosenCasesMatchFloat64) {
  std::vector<std::string> cases;
  for (int d : backward_head_dims()) {
    const std::string hd = " d=" + std::to_string(d);
    cases.push_back("b=1 sq=1000 sk=1000 h=2 hkv=1" + hd + " dtype=bf16 mask=causal");
    cases.push_back("b=2 sq=65 sk=300 h=4 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right det=1");
    cases.push_back("b=2 sq=300 sk=65 h=4 hkv=4" + hd + " dtype=bf16 mask=causal align=top_left");
    cases.push_back("b=1 sq=257 sk=513 h=3 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    cases.push_back("b=1 sq=1 sk=777 h=8 hkv=2" + hd + " dtype=f16 mask=none det=1");
    cases.push_back("b=3 sq=7 sk=7 h=2 hkv=2" + hd + " dtype=bf16 mask=none lens_q=0,7,1 lens_k=5,0,9");
    cases.push_back("b=1 sq=63 sk=1000 h=2 hkv=2" + hd + " dtype=f16 mask=window wl=0 wr=0");
    cases.push_back("b=1 sq=200 sk=333 h=2 hkv=1" + hd + " dtype=bf16 mask=causal scale=-0.09");
    // Just over a wave of tiles (134 key-block tiles on the H200's 132 SMs): whole tiles, then
    // the tail split's pieces (plan.hpp: choose_tail_split); GQA, soft-cap, ragged key block.
    // Short key sequences keep the float64 reference cheap.
    cases.push_back("b=2 sq=512 sk=16 h=67 hkv=67" + hd + " dtype=bf16 mask=none");
    cases.push_back("b=2 sq=500 sk=20 h=134 hkv=67" + hd + " dtype=f16 mask=none softcap=20");
  }
  for (const std::string& text : cases) {
    const harness::Case c = harness::parse_case(for_forced_path(text));
    const harness::CheckReport r = harness::check_case(c, Backend::cuda);
    EXPECT_TRUE(r.pass) << for_forced_path(text) << "\n" << r.to_string();
  }
}

// Deterministic mode: two runs give the same bits.
TEST_F(CudaBackward, DeterministicIsBitwiseRepeatable) {
  for (int d : backward_head_dims()) {
    const harness::Case c =
        harness::parse_case(for_forced_path("b=2 sq=700 sk=900 h=4 hkv=2 d=" + std::to_string(d) +
                                     " dtype=bf16 mask=causal det=1"));
    harness::CaseData data(c);
    const reference::ForwardResult ref = reference::forward_f64(data.problem());
    data.set_forward_outputs(ref.out, ref.lse);
    data.run_backward(Backend::cuda);
    const std::vector<std::uint8_t> dq = data.dq.snapshot(), dk = data.dk.snapshot(), dv = data.dv.snapshot();
    data.run_backward(Backend::cuda);
    EXPECT_TRUE(dq == data.dq.snapshot() && dk == data.dk.snapshot() && dv == data.dv.snapshot())
        << "d=" << d << ": deterministic backward differs between two runs";
  }
}

// Forward + deterministic backward captured into a CUDA graph and replayed give the eager bits:
// the calls stay on the caller's stream, and scratch is stream-ordered (graph memory nodes).
TEST_F(CudaBackward, GraphCaptureReplaysEagerResults) {
  for (int d : backward_head_dims()) {
    harness::CaseData data(harness::parse_case(
        for_forced_path("b=2 sq=300 sk=500 h=4 hkv=2 d=" + std::to_string(d) + " dtype=bf16 mask=causal det=1")));
    std::string detail;
    EXPECT_TRUE(harness::graph_replay_matches_eager(data, data.options(Backend::cuda), detail))
        << "d=" << d << ": " << detail;
  }
}

}  // namespace
}  // namespace fastattn::testing
