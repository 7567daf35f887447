// gpu_memory_cap_test.cpp — memory-capped mode on a CUDA device (ctest label `gpu`; skipped
// without a CUDA build and device). The arithmetic and message text are checked on any machine
// in device_memory_test.cpp; here: the need a call reports, a limit one byte short of it (error
// before anything runs), a limit equal to it (the call runs and is right), and every source of
// the limit.
#include <gtest/gtest.h>

#include <cstddef>
#include <optional>
#include <string>

#include "harness/device_mirror.hpp"
#include "harness/harness.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

class CudaMemoryCap : public GpuTest {
 protected:
  void TearDown() override { set_device_memory_limit(std::nullopt); }

  // b=2 sq=128 sk=256 h=4 hkv=2, bf16, the first compiled head dim.
  std::string case_text() const {
    return for_forced_path("b=2 sq=128 sk=256 h=4 hkv=2 d=" + std::to_string(build_info().cuda_head_dims.front()) +
                           " dtype=bf16 mask=causal seed=11");  // f16 under a forced sm75 / sm70 path
  }
  std::size_t head_dim() const { return static_cast<std::size_t>(build_info().cuda_head_dims.front()); }
};

TEST_F(CudaMemoryCap, ReportsTensorsPlusScratch) {
  ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
  const std::size_t d = head_dim();
  const std::size_t q_bytes = 2 * 128 * 4 * d * 2, k_bytes = 2 * 256 * 2 * d * 2, lse_bytes = 2 * 4 * 128 * 4;
  harness::CaseData data(harness::parse_case(case_text()));
  const KernelChoice fwd = harness::run_forward_on_device(data, data.options(Backend::cuda));
  EXPECT_EQ(fwd.device_memory_bytes, 2 * q_bytes + 2 * k_bytes + lse_bytes + fwd.workspace_bytes) << fwd.describe();
  const KernelChoice plan = plan_forward(data.q.view(), data.k.view(), data.v.view(), data.out.view(),
                                         data.lse.view(), data.options(Backend::reference));
  EXPECT_EQ(plan.device_memory_bytes, 0u) << "host tensors: no device memory";
  const KernelChoice bwd = harness::run_backward_on_device(data, data.options(Backend::cuda));
  EXPECT_EQ(bwd.device_memory_bytes, 4 * q_bytes + 4 * k_bytes + lse_bytes + bwd.workspace_bytes) << bwd.describe();
  EXPECT_NE(bwd.describe().find("device_memory="), std::string::npos) << bwd.describe();
}

TEST_F(CudaMemoryCap, OptionOneByteShortThrowsAtTheLimitRuns) {
  ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
  harness::CaseData probe(harness::parse_case(case_text()));
  const std::size_t fwd_need = harness::run_forward_on_device(probe, probe.options(Backend::cuda)).device_memory_bytes;
  const std::size_t bwd_need = harness::run_backward_on_device(probe, probe.options(Backend::cuda)).device_memory_bytes;
  ASSERT_GT(fwd_need, 0u);
  ASSERT_GT(bwd_need, fwd_need);

  harness::CaseData data(harness::parse_case(case_text()));
  AttentionOptions o = data.options(Backend::cuda);
  o.device_memory_limit_bytes = fwd_need - 1;
  const std::string limit_text = "limit (" + std::to_string(fwd_need - 1) + " bytes) set by options.device_memory_limit_bytes";
  expect_error([&] { harness::run_forward_on_device(data, o); }, ErrorCode::out_of_memory,
               "cuda forward: needs ");
  expect_error([&] { harness::run_forward_on_device(data, o); }, ErrorCode::out_of_memory, limit_text);
  o.device_memory_limit_bytes = fwd_need;
  EXPECT_NO_THROW(harness::run_forward_on_device(data, o));

  o.device_memory_limit_bytes = bwd_need - 1;
  expect_error([&] { harness::run_backward_on_device(data, o); }, ErrorCode::out_of_memory,
               "cuda backward: needs ");
  o.device_memory_limit_bytes = bwd_need;
  EXPECT_NO_THROW(harness::run_backward_on_device(data, o));
}

// Through the environment variable, so the harness's full check (values, unwritten outputs,
// untouched inputs) judges a capped call that fits.
TEST_F(CudaMemoryCap, EnvironmentLimitThatFitsPassesTheHarness) {
  harness::CaseData probe(harness::parse_case(case_text()));
  std::size_t need = 0;
  {
    ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
    need = harness::run_backward_on_device(probe, probe.options(Backend::cuda)).device_memory_bytes;
  }
  {
    ScopedEnv env(kDeviceMemoryLimitEnv, std::to_string(need));
    expect_pass(harness::check_case(harness::parse_case(case_text()), Backend::cuda));
  }
  {
    // 64 KiB: below both calls' needs (the forward alone needs ~0.5 MiB at d = 64).
    ScopedEnv env(kDeviceMemoryLimitEnv, std::string("64K"));
    harness::CaseData data(harness::parse_case(case_text()));
    expect_error([&] { harness::run_backward_on_device(data, data.options(Backend::cuda)); },
                 ErrorCode::out_of_memory, "over the 64 KiB limit (65536 bytes) set by FASTATTN_DEVICE_MEMORY_LIMIT=64K");
    expect_error([&] { harness::run_forward_on_device(data, data.options(Backend::cuda)); },
                 ErrorCode::out_of_memory, "set by FASTATTN_DEVICE_MEMORY_LIMIT=64K");
  }
  {
    ScopedEnv env(kDeviceMemoryLimitEnv, std::string("lots"));
    harness::CaseData data(harness::parse_case(case_text()));
    expect_error([&] { harness::run_forward_on_device(data, data.options(Backend::cuda)); },
                 ErrorCode::invalid_argument, "FASTATTN_DEVICE_MEMORY_LIMIT: expected bytes or a size with a unit");
  }
}

// plan_* never touches the tensors: views labelled cuda:0 over host memory size a call, and over
// the limit plan_* throws the call's error, so a batch can be sized without running anything.
TEST_F(CudaMemoryCap, PlanReportsTheNeedAndTheError) {
  ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
  harness::CaseData data(harness::parse_case(case_text()));
  auto on_device = [](TensorView t) {
    t.device = Device::cuda(0);
    return t;
  };
  const TensorView q = on_device(data.q.view()), k = on_device(data.k.view()), v = on_device(data.v.view());
  const TensorView out = on_device(data.out.view()), lse = on_device(data.lse.view());
  const TensorView dout = on_device(data.dout.view()), dq = on_device(data.dq.view());
  const TensorView dk = on_device(data.dk.view()), dv = on_device(data.dv.view());
  AttentionOptions o = data.options(Backend::cuda);
  const KernelChoice fwd = plan_forward(q, k, v, out, lse, o);
  const KernelChoice bwd = plan_backward(dout, q, k, v, out, lse, dq, dk, dv, o);
  harness::CaseData ran(harness::parse_case(case_text()));
  EXPECT_EQ(fwd.device_memory_bytes, harness::run_forward_on_device(ran, o).device_memory_bytes);
  EXPECT_EQ(bwd.device_memory_bytes, harness::run_backward_on_device(ran, o).device_memory_bytes);
  o.device_memory_limit_bytes = fwd.device_memory_bytes - 1;
  expect_error([&] { plan_forward(q, k, v, out, lse, o); }, ErrorCode::out_of_memory, "cuda forward: needs ");
  o.device_memory_limit_bytes = fwd.device_memory_bytes;
  EXPECT_NO_THROW(plan_forward(q, k, v, out, lse, o));
  expect_error([&] { plan_backward(dout, q, k, v, out, lse, dq, dk, dv, o); }, ErrorCode::out_of_memory,
               "cuda backward: needs ");
}

TEST_F(CudaMemoryCap, ProcessLimitAppliesAndOptionOverridesIt) {
  ScopedEnv unset(kDeviceMemoryLimitEnv, std::nullopt);
  harness::CaseData data(harness::parse_case(case_text()));
  set_device_memory_limit(4096);
  expect_error([&] { harness::run_forward_on_device(data, data.options(Backend::cuda)); }, ErrorCode::out_of_memory,
               "over the 4 KiB limit (4096 bytes) set by set_device_memory_limit()");
  AttentionOptions o = data.options(Backend::cuda);
  o.device_memory_limit_bytes = std::size_t{1} << 40;
  EXPECT_NO_THROW(harness::run_forward_on_device(data, o));
  set_device_memory_limit(0);
  EXPECT_NO_THROW(harness::run_forward_on_device(data, data.options(Backend::cuda)));
}

}  // namespace
}  // namespace fastattn::testing
