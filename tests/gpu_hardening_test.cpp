// gpu_hardening_test.cpp — issue 14's CUDA hardening (ctest label `gpu`):
//   * scratch comes from fastattn's own memory pool: the device's default pool, which other
//     libraries share, keeps its release threshold;
//   * a caller's Workspace that is not 256-byte aligned is refused by the backward as by the
//     forward, before anything is written;
//   * the forward and the backward give the caller's current device back, also when they throw.
// Every test skips without a CUDA build and device (GpuTest). The device guard's logic and the
// workspace check's messages are tested on any machine (environment_test.cpp).
#include <gtest/gtest.h>

// These tests call the CUDA runtime themselves: tests/CMakeLists.txt defines FASTATTN_TESTS_CUDA=1
// in CUDA builds (a CPU build may still find a cuda_runtime.h, so __has_include cannot tell).
#if defined(FASTATTN_TESTS_CUDA) && FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuda/common/device_scratch.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

// One f16 problem on cuda:0, [1, seqlen, heads, d], every tensor its own cudaMalloc; inputs
// zero, outputs poisoned with 0x7f bytes.
struct DeviceProblem {
  static constexpr std::int64_t kSeqlen = 256, kHeads = 2;
  std::int64_t d = 64;
  std::vector<void*> buffers;
  TensorView q, k, v, out, lse, dout, dq, dk, dv;

  explicit DeviceProblem(std::int64_t head_dim) : d(head_dim) {
    q = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x00);
    k = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x00);
    v = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x00);
    dout = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x00);
    lse = tensor(DType::f32, {1, kHeads, kSeqlen}, 0x00);
    out = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x7f);
    dq = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x7f);
    dk = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x7f);
    dv = tensor(DType::f16, {1, kSeqlen, kHeads, d}, 0x7f);
  }
  ~DeviceProblem() {
    for (void* p : buffers) cudaFree(p);
  }
  TensorView tensor(DType dtype, std::initializer_list<std::int64_t> shape, int byte) {
    std::size_t n = 1;
    for (std::int64_t s : shape) n *= static_cast<std::size_t>(s);
    void* p = nullptr;
    const std::size_t bytes = n * dtype_size(dtype);
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, byte, bytes), cudaSuccess);
    buffers.push_back(p);
    return make_tensor(p, dtype, shape, Device::cuda(0));
  }
  // Whether every byte of `t` still holds `byte`.
  static bool all_bytes(const TensorView& t, unsigned char byte) {
    std::vector<unsigned char> host(static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype));
    if (cudaMemcpy(host.data(), t.data, host.size(), cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (unsigned char b : host) {
      if (b != byte) return false;
    }
    return true;
  }
  AttentionOptions options() const {
    AttentionOptions o;
    o.backend = Backend::cuda;
    o.causal = true;
    return o;
  }
  KernelChoice run_forward(const AttentionOptions& o) { return forward(q, k, v, out, lse, o); }
  KernelChoice run_backward(const AttentionOptions& o) { return backward(dout, q, k, v, out, lse, dq, dk, dv, o); }
  KernelChoice plan_backward_call(const AttentionOptions& o) {
    return plan_backward(dout, q, k, v, out, lse, dq, dk, dv, o);
  }
};

class CudaHardening : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    head_dim_ = build_info().cuda_head_dims.front();
    if (lowres_path_forced() && head_dim_ > 128) GTEST_SKIP() << "the forced path has no backward at d > 128";
  }
  std::int64_t head_dim_ = 64;
};

std::uint64_t default_pool_release_threshold(int device) {
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, device), cudaSuccess);
  std::uint64_t threshold = 0;
  EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), cudaSuccess);
  return threshold;
}

// Before: fastattn set the default pool's release threshold to UINT64_MAX on the first call.
TEST_F(CudaHardening, DefaultMemPoolKeepsItsReleaseThreshold) {
  const std::uint64_t before = default_pool_release_threshold(0);
  DeviceProblem p(head_dim_);
  const ScopedEnv splits("FASTATTN_CUDA_NUM_SPLITS", std::string("4"));  // forward scratch too
  const KernelChoice fwd = p.run_forward(p.options());
  EXPECT_GT(fwd.workspace_bytes, 0u) << fwd.describe();
  const KernelChoice bwd = p.run_backward(p.options());
  EXPECT_GT(bwd.workspace_bytes, 0u) << bwd.describe();
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ(default_pool_release_threshold(0), before);

  // The scratch pool is fastattn's own, and caches what it frees.
  cudaMemPool_t default_pool = nullptr;
  ASSERT_CUDA(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  const cudaMemPool_t ours = cuda::scratch_pool(0);
  EXPECT_NE(ours, default_pool);
  std::uint64_t threshold = 0;
  ASSERT_CUDA(cudaMemPoolGetAttribute(ours, cudaMemPoolAttrReleaseThreshold, &threshold));
  EXPECT_EQ(threshold, UINT64_MAX);
}

// Before: the backward used a misaligned Workspace (only the forward checked).
TEST_F(CudaHardening, BackwardRefusesAMisalignedWorkspaceBeforeWriting) {
  DeviceProblem p(head_dim_);
  const std::size_t bytes = p.plan_backward_call(p.options()).workspace_bytes;
  ASSERT_GT(bytes, 0u);
  void* memory = nullptr;
  ASSERT_CUDA(cudaMalloc(&memory, bytes + 256));
  p.buffers.push_back(memory);
  const Workspace misaligned{static_cast<unsigned char*>(memory) + 16, bytes};
  AttentionOptions o = p.options();
  o.workspace = &misaligned;
  expect_error([&] { p.run_backward(o); }, ErrorCode::invalid_argument,
               "options.workspace: expected data aligned to 256 bytes for the CUDA kernels, got an address "
               "256 * k + 16");
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(DeviceProblem::all_bytes(p.dq, 0x7f)) << "dq written";
  EXPECT_TRUE(DeviceProblem::all_bytes(p.dk, 0x7f)) << "dk written";
  EXPECT_TRUE(DeviceProblem::all_bytes(p.dv, 0x7f)) << "dv written";

  // The same Workspace aligned runs.
  const Workspace aligned{memory, bytes};
  o.workspace = &aligned;
  EXPECT_NO_THROW(p.run_backward(o));
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_FALSE(DeviceProblem::all_bytes(p.dq, 0x7f));
}

TEST_F(CudaHardening, ForwardRefusesAMisalignedWorkspaceBeforeWriting) {
  DeviceProblem p(head_dim_);
  const ScopedEnv splits("FASTATTN_CUDA_NUM_SPLITS", std::string("4"));
  const std::size_t bytes = plan_forward(p.q, p.k, p.v, p.out, p.lse, p.options()).workspace_bytes;
  ASSERT_GT(bytes, 0u);
  void* memory = nullptr;
  ASSERT_CUDA(cudaMalloc(&memory, bytes + 256));
  p.buffers.push_back(memory);
  const Workspace misaligned{static_cast<unsigned char*>(memory) + 64, bytes};
  AttentionOptions o = p.options();
  o.workspace = &misaligned;
  expect_error([&] { p.run_forward(o); }, ErrorCode::invalid_argument, "got an address 256 * k + 64");
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(DeviceProblem::all_bytes(p.out, 0x7f)) << "out written";
}

// A call that throws after the device switch (a misaligned Workspace, checked once the call's
// device is current) and one that runs: the caller's current device is unchanged. With two or
// more GPUs the caller's device is another one than the tensors', so the switch happens (before:
// the forward did not switch back when it threw); with one GPU this checks the no-switch path.
TEST_F(CudaHardening, CallsGiveTheCallersDeviceBack) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  const int caller = count > 1 ? count - 1 : 0;
  DeviceProblem p(head_dim_);  // on cuda:0
  const ScopedEnv splits("FASTATTN_CUDA_NUM_SPLITS", std::string("4"));
  const std::size_t fwd_bytes = plan_forward(p.q, p.k, p.v, p.out, p.lse, p.options()).workspace_bytes;
  const std::size_t bwd_bytes = p.plan_backward_call(p.options()).workspace_bytes;
  void* memory = nullptr;
  ASSERT_CUDA(cudaMalloc(&memory, fwd_bytes + bwd_bytes + 256));
  p.buffers.push_back(memory);
  const Workspace misaligned{static_cast<unsigned char*>(memory) + 32, fwd_bytes + bwd_bytes};
  AttentionOptions bad = p.options();
  bad.workspace = &misaligned;

  ASSERT_CUDA(cudaSetDevice(caller));
  int current = -1;
  expect_error([&] { p.run_forward(bad); }, ErrorCode::invalid_argument, "options.workspace");
  ASSERT_CUDA(cudaGetDevice(&current));
  EXPECT_EQ(current, caller) << "after a forward that threw";
  expect_error([&] { p.run_backward(bad); }, ErrorCode::invalid_argument, "options.workspace");
  ASSERT_CUDA(cudaGetDevice(&current));
  EXPECT_EQ(current, caller) << "after a backward that threw";
  p.run_forward(p.options());
  ASSERT_CUDA(cudaGetDevice(&current));
  EXPECT_EQ(current, caller) << "after a forward";
  p.run_backward(p.options());
  ASSERT_CUDA(cudaGetDevice(&current));
  EXPECT_EQ(current, caller) << "after a backward";
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace fastattn::testing

#else  // no FASTATTN_TESTS_CUDA

#include "test_support.hpp"

namespace fastattn::testing {
namespace {

// A CUDA build must compile the tests above; say so instead of passing with none of them.
TEST(CudaHardening, CompiledWithTheCudaRuntime) {
  if (!build_info().cuda_compiled) GTEST_SKIP() << "fastattn was built without CUDA";
  FAIL() << "a CUDA build of fastattn_gpu_tests without FASTATTN_TESTS_CUDA=1 (tests/CMakeLists.txt): "
            "gpu_hardening_test.cpp's tests were not compiled";
}

}  // namespace
}  // namespace fastattn::testing

#endif  // FASTATTN_TESTS_CUDA
