// cooperative_cost_model_test.cpp — the cooperative step's cost model (fastattn/cooperative.hpp:
// choose_cooperative_split) on the CPU: the split it chooses for given rates (decode balance,
// prefill, missing rates, forced policies) and the parsing of FASTATTN_COOP_RATES. The cache's
// bookkeeping is in cooperative_cache_test.cpp, the step's exactness in cooperative_step_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "cooperative_support.hpp"
#include "fastattn/fastattn.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using testing::expect_error;
using testing::rates;

// Llama-3-8B layer pages: 256 tokens x 8 KV heads x d128 bf16, K+V = 1 MiB a page.
CooperativeSplit llama_split(std::int64_t dev, std::int64_t host, const CooperativeRates& r, std::int64_t sq = 1,
                             SplitPolicy policy = SplitPolicy::automatic) {
  CooperativeOptions o;
  o.policy = policy;
  return choose_cooperative_split(dev, host, 256, 8, 128, DType::bf16, sq, 32, 32, r, o);
}

TEST(CooperativeCostModel, BalancesStreamingAndCpu) {
  // s = 1 MiB / 50 GB/s, c = 1 MiB / min(60, 80) GB/s: x / H = c / (s + c) = 50 / 110.
  const auto split = llama_split(512, 3584, rates(50e9, 80e9, 60e9));
  EXPECT_EQ(split.device_pages, 512);
  EXPECT_EQ(split.streamed_pages, std::llround(3584 * 50.0 / 110.0));
  EXPECT_EQ(split.streamed_pages + split.cpu_pages, 3584);
  EXPECT_NEAR(split.streamed_s, split.cpu_s, 2e-4 * split.cpu_s + 3e-5);
  EXPECT_NE(split.choice.reason.find("to finish together"), std::string::npos) << split.choice.reason;
  EXPECT_NE(split.choice.reason.find("split 512 device / 1629 streamed"), std::string::npos) << split.choice.reason;
}

TEST(CooperativeCostModel, HostReadDuringDmaCapsTheCpu) {
  // The CPU kernel could read 100 GB/s, but only 25 GB/s is left while the DMA runs.
  const auto split = llama_split(0, 1000, rates(50e9, 25e9, 100e9));
  EXPECT_EQ(split.streamed_pages, std::llround(1000 * 50.0 / 75.0));
  EXPECT_NE(split.choice.reason.find("host read during DMA 25.0 GB/s"), std::string::npos) << split.choice.reason;
}

TEST(CooperativeCostModel, MissingRates) {
  auto split = llama_split(10, 100, rates(0, 80e9, 60e9));
  EXPECT_EQ(split.streamed_pages, 0);
  EXPECT_EQ(split.cpu_pages, 100);
  EXPECT_NE(split.choice.reason.find("no host-to-device copy rate"), std::string::npos);
  split = llama_split(10, 100, rates(50e9, 80e9, 0, 4e12, 4e14, 0));
  EXPECT_EQ(split.streamed_pages, 100);
  EXPECT_NE(split.choice.reason.find("no CPU attention rate"), std::string::npos);
  split = llama_split(10, 0, rates(50e9, 80e9, 60e9));
  EXPECT_EQ(split.streamed_pages + split.cpu_pages, 0);
  EXPECT_NE(split.choice.reason.find("every page is on the device"), std::string::npos);
}

TEST(CooperativeCostModel, PrefillGoesToTheGpu) {
  // 8192 queries: a page is 2 x 2 x 8192 x 32 x 256 x 128 = 34 GFLOP; the GPU at 400 TFLOP/s
  // takes 86 us (compute-bound, more than the 21 us copy), the CPU at 1 TFLOP/s 34 ms.
  const auto split = llama_split(512, 3584, rates(50e9, 80e9, 60e9), 8192);
  EXPECT_LT(split.cpu_pages, 3584 / 300);
  EXPECT_NE(split.choice.reason.find("compute-bound"), std::string::npos) << split.choice.reason;
}

// The kernel of the GPU parts follows seqlen_q alone; with the forward kernel the device and
// streamed parts share the GPU, the CPU's share is rounded down with its time counted 4x (the CPU
// part never sets a prefill step's time, even at a 4x optimistic CPU rate) and the reason names
// the chunks.
TEST(CooperativeCostModel, PrefillChoices) {
  const auto r = rates(50e9, 80e9, 60e9);
  EXPECT_EQ(llama_split(0, 100, r, 16).gpu_kernel, CooperativeKernel::kv_cache);
  EXPECT_EQ(cooperative_gpu_kernel(kCooperativeDecodeMaxQueries), CooperativeKernel::kv_cache);
  EXPECT_EQ(cooperative_gpu_kernel(kCooperativeDecodeMaxQueries + 1), CooperativeKernel::forward);
  for (const std::int64_t sq : {17, 512, 8192}) {
    for (const std::int64_t host : {1, 7, 224, 1000, 3584}) {
      const auto split = llama_split(32, host, r, sq);
      EXPECT_EQ(split.gpu_kernel, CooperativeKernel::forward);
      EXPECT_EQ(split.streamed_pages + split.cpu_pages, host);
      EXPECT_LE(split.cpu_s, (split.device_s + split.streamed_s) * (1 + 1e-12))  // cpu_s: with the 4x
          << "sq " << sq << " host " << host << ": " << split.choice.reason;
      EXPECT_DOUBLE_EQ(split.step_s, std::max(split.device_s + split.streamed_s, split.cpu_s));
    }
  }
  // The H200 run's rates (2026-12-02: CPU 3.57 TFLOP/s by its 512 x 4096 shape, GPU 633 TFLOP/s,
  // PCIe 55.2 GB/s): the CPU got 1 of 224 pages and took ~33 ms of a 16 ms GPU step. Now none.
  EXPECT_EQ(llama_split(32, 224, rates(55.2e9, 75.2e9, 64.1e9, 4.04e12, 633e12, 3.57e12), 8192).cpu_pages, 0);
  // A CPU as fast as the GPU per page (a made-up rate) still gets a share that ends first.
  const auto even = llama_split(32, 224, rates(50e9, 80e9, 1e12, 4e12, 400e12, 400e12), 8192);
  EXPECT_GT(even.cpu_pages, 0);
  EXPECT_LE(even.cpu_s, (even.device_s + even.streamed_s) * (1 + 1e-12)) << even.choice.reason;
  EXPECT_NE(even.choice.reason.find("the CPU's page time counted 4x"), std::string::npos) << even.choice.reason;
  // 8192 queries over 224 host pages (gpu-coop.sh's prefill): every page streamed, in 32-page chunks.
  const auto split = llama_split(32, 224, r, 8192);
  EXPECT_EQ(split.cpu_pages, 0);
  EXPECT_NE(split.choice.reason.find("prefill (seqlen_q 8192 > 16)"), std::string::npos) << split.choice.reason;
  EXPECT_NE(split.choice.reason.find("streamed chunk of up to 8192 tokens"), std::string::npos) << split.choice.reason;
  // Short queries keep the rounded balance of decode.
  EXPECT_EQ(llama_split(512, 3584, r, 1).streamed_pages, std::llround(3584 * 50.0 / 110.0));
}

TEST(CooperativeCostModel, ForcedPolicies) {
  const auto r = rates(50e9, 80e9, 60e9);
  EXPECT_EQ(llama_split(0, 100, r, 1, SplitPolicy::stream_all).streamed_pages, 100);
  EXPECT_EQ(llama_split(0, 100, r, 1, SplitPolicy::cpu_all).cpu_pages, 100);
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.25;
  EXPECT_EQ(choose_cooperative_split(0, 100, 256, 8, 128, DType::bf16, 1, 32, 32, r, o).streamed_pages, 25);
}

TEST(CooperativeCostModel, ParsesRates) {
  const auto r = parse_cooperative_rates("pcie=50e9,host=80e9,cpu=6e10,hbm=4e12,flops=4e14,cpuflops=1e12");
  EXPECT_EQ(r.pcie_h2d, 50e9);
  EXPECT_EQ(r.cpu_attention, 6e10);
  EXPECT_EQ(r.cpu_attention_flops, 1e12);
  expect_error([] { parse_cooperative_rates("pcie=fast"); }, ErrorCode::invalid_argument, "FASTATTN_COOP_RATES");
  expect_error([] { parse_cooperative_rates("disk=1"); }, ErrorCode::invalid_argument, "disk");
}

}  // namespace
}  // namespace fastattn
