// gpu_kv_cache_kernel_graph_test.cpp — the CUDA KV-cache kernels (src/cuda/inference/kv_cache.hpp)
// in a CUDA graph, label `gpu`: kv_cache_forward captured once (append + attention + combine) and
// replayed with seqlens and the block table changed on the device, bitwise equal to eager calls
// (with the programmatic dependent launch, the sm90 default, and without it).
// The device case is gpu_kv_cache_kernel_support.hpp's; the float64 checks are in
// gpu_kv_cache_kernel_cases_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/inference/kv_cache.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "gpu_kv_cache_kernel_support.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing::kv_cache_kernel {
namespace {

#if FASTATTN_TESTS_CUDA
// kv_cache_forward captured once in a CUDA graph (append + attention + combine), replayed with
// seqlens and the block table changed on the device: bitwise equal to eager calls. page_size:
// the cache's; load: the K/V loads the plan must take (FASTATTN_CUDA_KV_LOAD, set by the caller).
void expect_graph_replay_bitwise_eager(std::int64_t page_size, cuda::KVLoad load) {
  KVCase c;
  c.heads = 32;
  c.kv_heads = 8;
  c.held = std::vector<std::int32_t>{1000, 7, 300};
  c.capacity = 2048;
  c.page_size = page_size;
  c.seqlen_new = 1;
  c.nan_outside = false;  // the variants below make other slots visible
  const KVRun r = make_inputs(c);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  DeviceCall call(c, r, stream);
  const cuda::KVCacheLaunch launch = cuda::kv_cache_plan(call.problem, c.capacity);
  ASSERT_GT(launch.num_splits, 1) << launch.reason << ": the graph should hold the combine too";
  ASSERT_EQ(launch.load, load) << launch.reason;
  DeviceBuffer scratch(launch.scratch_bytes);
  DeviceBuffer cache_k(r.cache.k), cache_v(r.cache.v);  // the cache before any append

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    cuda::kv_cache_forward(call.problem, launch, scratch.data);
  } catch (...) {  // end the capture, so the thread's later CUDA calls (other tests) still work
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  const std::vector<std::vector<std::int32_t>> variants = {{1000, 7, 300}, {2047, 0, 1}, {16, 1500, 31}, {3, 3, 3}};
  std::vector<std::uint16_t> previous_out;
  for (std::size_t variant = 0; variant < variants.size(); ++variant) {
    const std::vector<std::int32_t>& seqlens = variants[variant];
    // Other pages for the same sequences: the table rotated (still distinct pages, so appends of
    // different sequences never share a slot).
    std::vector<std::int32_t> table = r.cache.block_table;
    std::rotate(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(variant * 5 % table.size()), table.end());
    struct Result {
      std::vector<std::uint16_t> out;
      std::vector<float> lse;
      std::vector<std::uint16_t> k, v;
    } results[2];
    for (int eager = 0; eager < 2; ++eager) {
      // Restore the cache, set the values, poison the outputs: all outside the graph.
      cuda_ok(cudaMemcpy(call.k.data, cache_k.data, cache_k.bytes, cudaMemcpyDeviceToDevice), "restore k");
      cuda_ok(cudaMemcpy(call.v.data, cache_v.data, cache_v.bytes, cudaMemcpyDeviceToDevice), "restore v");
      call.seqlens.upload(seqlens);
      call.block_table.upload(table);
      call.poison();
      if (eager == 0) {
        cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      } else {
        cuda::kv_cache_forward(call.problem, launch, scratch.data);
      }
      cuda_ok(cudaStreamSynchronize(stream), eager ? "eager call" : "graph replay");
      call.fetch_outputs();
      Result& res = results[eager];
      for (std::int64_t i = 0; i < call.out.numel(); ++i) res.out.push_back(static_cast<std::uint16_t>(call.out.bits(i)));
      for (std::int64_t i = 0; i < call.lse.numel(); ++i) res.lse.push_back(static_cast<float>(call.lse.get(i)));
      res.k = call.k.download<std::uint16_t>();
      res.v = call.v.download<std::uint16_t>();
    }
    const std::string what = "seqlens " + std::to_string(seqlens[0]) + "," + std::to_string(seqlens[1]) + "," +
                             std::to_string(seqlens[2]);
    EXPECT_EQ(results[0].out, results[1].out) << what;
    EXPECT_EQ(std::memcmp(results[0].lse.data(), results[1].lse.data(), results[0].lse.size() * sizeof(float)), 0)
        << what;
    EXPECT_EQ(results[0].k, results[1].k) << what;
    EXPECT_EQ(results[0].v, results[1].v) << what;
    EXPECT_NE(results[0].out, previous_out) << what << ": the replay should follow the new seqlens";
    previous_out = results[0].out;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}
#endif

TEST_F(CudaKVCacheKernel, GraphReplayWithChangedSeqlensIsBitwiseEager) {
#if FASTATTN_TESTS_CUDA
  expect_graph_replay_bitwise_eager(16, cuda::KVLoad::cp_async);
#endif
}

// The same on TMA loads (sm90; kv_cache_tma.hpp: the tensor maps are kernel parameters, encoded
// for the cache's pointers when the graph is captured), pages of 64 tokens.
TEST_F(CudaKVCacheKernel, GraphReplayOnTmaLoadsIsBitwiseEager) {
#if FASTATTN_TESTS_CUDA
  if (!tma_loads_available(128)) GTEST_SKIP() << "no TMA loads here (sm90 devices, builds with sm_90 code)";
  const ScopedEnv env("FASTATTN_CUDA_KV_LOAD", std::string("tma"));
  expect_graph_replay_bitwise_eager(64, cuda::KVLoad::tma);
#endif
}

// The programmatic dependent launch (kv_cache_plan.cu: KVCacheLaunch::pdl): planned on an sm90
// device whose build has sm_90 code (what TMA loads need as well), named in the reason, never
// with FASTATTN_CUDA_KV_PDL=0 (under which graph replay is bitwise eager too); another value is
// an error naming the variable.
TEST_F(CudaKVCacheKernel, ProgrammaticLaunchIsPlannedOnSm90AndSwitchesOff) {
#if FASTATTN_TESTS_CUDA
  KVCase c;
  c.held = std::vector<std::int32_t>{300, 7};
  c.capacity = 512;
  c.page_size = 16;
  const KVRun r = make_inputs(c);
  DeviceCall call(c, r, nullptr);
  const cuda::KVCacheLaunch automatic = cuda::kv_cache_plan(call.problem, c.capacity);
  const bool named = automatic.reason.find("programmatic dependent") != std::string::npos;
  EXPECT_EQ(named, automatic.pdl) << automatic.reason;
  if (device_is_sm90()) {
    EXPECT_EQ(automatic.pdl, tma_loads_available(c.head_dim)) << automatic.reason;
  }
  {
    const ScopedEnv off("FASTATTN_CUDA_KV_PDL", std::string("0"));
    const cuda::KVCacheLaunch plain = cuda::kv_cache_plan(call.problem, c.capacity);
    EXPECT_FALSE(plain.pdl) << plain.reason;
    EXPECT_EQ(plain.reason.find("programmatic dependent"), std::string::npos) << plain.reason;
    expect_graph_replay_bitwise_eager(16, cuda::KVLoad::cp_async);
  }
  const ScopedEnv bad("FASTATTN_CUDA_KV_PDL", std::string("2"));
  try {
    (void)cuda::kv_cache_plan(call.problem, c.capacity);
    ADD_FAILURE() << "FASTATTN_CUDA_KV_PDL=2 was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("FASTATTN_CUDA_KV_PDL"), std::string::npos) << e.what();
  }
#endif
}

}  // namespace
}  // namespace fastattn::testing::kv_cache_kernel
