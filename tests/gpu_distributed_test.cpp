// gpu_distributed_test.cpp — the NCCL communicator and the CUDA tiling-AllReduce on ONE GPU: a
// one-rank NCCL group (loopback; NCCL refuses two ranks on one GPU). Skipped without a CUDA
// build, a device, or NCCL (CMake FASTATTN_NCCL). Not yet run: no GPU time was left when it was
// written (docs/distributed.md). Run with tools/dev/gpu-tests.sh, GTEST_FILTER=NcclLoopback.*.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/dtype.hpp"
#include "fastattn/distributed.hpp"
#include "harness/judge.hpp"
#include "harness/random.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing {
namespace {

class NcclLoopback : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    if (!distributed::nccl_compiled()) GTEST_SKIP() << "fastattn was built without NCCL";
  }
};

#if FASTATTN_TESTS_CUDA
#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Device memory for one test, freed at scope end.
struct DeviceBytes {
  void* ptr = nullptr;
  explicit DeviceBytes(std::size_t bytes) {
    if (cudaMalloc(&ptr, bytes ? bytes : 1) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBytes() {
    if (ptr) cudaFree(ptr);
  }
};

std::vector<std::uint8_t> random_bytes(DType dtype, std::int64_t n, std::uint64_t seed, double scale = 1.0) {
  harness::Random rng(seed);
  std::vector<std::uint8_t> b(static_cast<std::size_t>(n) * dtype_size(dtype));
  for (std::int64_t i = 0; i < n; ++i) store_element(b.data(), dtype, i, scale * (0.25 + rng.normal()));
  return b;
}
#endif

TEST_F(NcclLoopback, OneRankCollectivesAndNvlsOff) {
#if FASTATTN_TESTS_CUDA
  const bool user_set_nvls = std::getenv("NCCL_NVLS_ENABLE") != nullptr;
  auto comm = distributed::make_nccl_communicator(distributed::nccl_unique_id(), 0, 1, 0);
  if (!user_set_nvls) {
    EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  }
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend_name(), "nccl");
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const std::int64_t n = 1001;
    const std::vector<std::uint8_t> host = random_bytes(dtype, n, 5);
    DeviceBytes buf(host.size()), copy(host.size());
    ASSERT_TRUE(buf.ptr && copy.ptr);
    CUDA_OK(cudaMemcpy(buf.ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
    // The sum over one rank is the buffer itself; send_recv to itself is a copy.
    comm->all_reduce_sum(make_tensor(buf.ptr, dtype, {n}, Device::cuda(0)));
    comm->send_recv(make_tensor(buf.ptr, dtype, {n}, Device::cuda(0)), 0, make_tensor(copy.ptr, dtype, {n}, Device::cuda(0)), 0);
    comm->synchronize(nullptr);
    std::vector<std::uint8_t> back(host.size());
    CUDA_OK(cudaMemcpy(back.data(), copy.ptr, back.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(back, host) << to_string(dtype);
  }
  comm->barrier();
  comm->abort("test over");
  expect_error([&] { comm->barrier(); }, ErrorCode::device_error, "the communicator was aborted (test over)");
#endif
}

// matmul_all_reduce on a one-rank group: the per-tile cuBLASLt GEMMs, the events and the
// reduction stream, judged against float64 like the CPU test (2 x the naive f32 error + floor);
// overlapped and sequential use the same tiles, hence the same bits.
TEST_F(NcclLoopback, MatmulAllReduceMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  auto comm = distributed::make_nccl_communicator(distributed::nccl_unique_id(), 0, 1, 0);
  const std::int64_t m = 1000, k = 256, n = 384;  // m: not a multiple of the 128-row tiles
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::vector<std::uint8_t> a = random_bytes(dtype, m * k, 11), w = random_bytes(dtype, k * n, 12, 1.0 / 16);
    DeviceBytes da(a.size()), dw(w.size()), dout(static_cast<std::size_t>(m * n) * dtype_size(dtype));
    ASSERT_TRUE(da.ptr && dw.ptr && dout.ptr);
    CUDA_OK(cudaMemcpy(da.ptr, a.data(), a.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(dw.ptr, w.data(), w.size(), cudaMemcpyHostToDevice));
    std::vector<std::vector<std::uint8_t>> results;
    for (bool overlap : {true, false}) {
      CUDA_OK(cudaMemset(dout.ptr, 0xff, static_cast<std::size_t>(m * n) * dtype_size(dtype)));
      distributed::TilingAllReduceOptions o;
      o.overlap = overlap;
      const auto report = distributed::matmul_all_reduce(*comm, make_tensor(da.ptr, dtype, {m, k}, Device::cuda(0)),
                                                         make_tensor(dw.ptr, dtype, {k, n}, Device::cuda(0)),
                                                         make_tensor(dout.ptr, dtype, {m, n}, Device::cuda(0)), o);
      EXPECT_EQ(report.path, "cuda-cublaslt+nccl");
      EXPECT_EQ(report.tile_rows % 128, 0);
      CUDA_OK(cudaDeviceSynchronize());
      results.emplace_back(static_cast<std::size_t>(m * n) * dtype_size(dtype));
      CUDA_OK(cudaMemcpy(results.back().data(), dout.ptr, results.back().size(), cudaMemcpyDeviceToHost));
    }
    EXPECT_EQ(results[0], results[1]);
    const double eps = harness::epsilon(dtype), eps32 = 0x1.0p-23;
    double err = 0, naive_err = 0, floor = 0;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t c = 0; c < n; ++c) {
        double ref = 0, terms = 0;
        float naive = 0;
        for (std::int64_t j = 0; j < k; ++j) {
          const double x = load_element(a.data(), dtype, i * k + j) * load_element(w.data(), dtype, j * n + c);
          ref += x;
          terms += std::fabs(x);
          naive += static_cast<float>(x);
        }
        std::uint8_t rounded[4];
        store_element(rounded, dtype, 0, naive);
        const double got = load_element(results[0].data(), dtype, i * n + c);
        ASSERT_FALSE(std::isnan(got)) << "element (" << i << ", " << c << ") unwritten";
        err = std::fmax(err, std::fabs(got - ref));
        naive_err = std::fmax(naive_err, std::fabs(load_element(rounded, dtype, 0) - ref));
        floor = std::fmax(floor, eps * std::fabs(ref) + 4 * std::sqrt(double(k)) * eps32 * terms);
      }
    EXPECT_LE(err, 2 * naive_err + floor) << to_string(dtype) << " naive " << naive_err << " floor " << floor;
  }
#endif
}

}  // namespace
}  // namespace fastattn::testing
