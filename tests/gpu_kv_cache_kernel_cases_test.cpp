// gpu_kv_cache_kernel_cases_test.cpp — the CUDA KV-cache kernels at the internal level
// (src/cuda/inference/kv_cache.hpp: kv_cache_plan / kv_cache_forward) on chosen cases judged
// against float64, label `gpu`: the plan's K/V ring, the reduced and the deep rings, forced split
// counts and the fused combine.
//
// Each case (gpu_kv_cache_kernel_support.hpp) builds a KVCacheProblem by hand from device
// buffers. After the run the cache is compared bitwise with the host's append, the visible keys
// are gathered on the host and the output and lse judged against the float64 oracle
// (src/reference) by the harness's rule (harness/judge.hpp). The CUDA-graph replay is in
// gpu_kv_cache_kernel_graph_test.cpp; the plan's host-side heuristics are checked in
// kv_cache_heuristics_test.cpp (CPU suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "gpu_kv_cache_kernel_support.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing::kv_cache_kernel {
namespace {

#if FASTATTN_TESTS_CUDA
// The float64 oracle and the naive baseline over the visible keys, gathered from the expected
// cache (the append applied), as a varlen problem on the host.
struct HostReference {
  std::vector<std::uint16_t> k, v;  // [total_k, kv_heads, d]
  std::vector<std::int32_t> cu_q, cu_k;
  AttentionProblem p;
};

HostReference host_problem(const KVCase& c, const KVRun& r) {
  HostReference h;
  const std::int64_t b = c.batch(), d = c.head_dim, cap = r.expected.capacity;
  h.cu_q.push_back(0);
  h.cu_k.push_back(0);
  std::int64_t max_k = 0;
  for (std::int64_t s = 0; s < b; ++s) {
    const std::int64_t len = attended_length(c, s, cap);
    max_k = std::max(max_k, len);
    for (std::int64_t t = 0; t < len; ++t)
      for (std::int64_t kvh = 0; kvh < c.kv_heads; ++kvh) {
        const std::int64_t at = r.expected.offset(s, t, kvh);
        h.k.insert(h.k.end(), r.expected.k.begin() + at, r.expected.k.begin() + at + d);
        h.v.insert(h.v.end(), r.expected.v.begin() + at, r.expected.v.begin() + at + d);
      }
    h.cu_q.push_back(static_cast<std::int32_t>((s + 1) * c.seqlen_q));
    h.cu_k.push_back(h.cu_k.back() + static_cast<std::int32_t>(len));
  }
  AttentionProblem& p = h.p;
  p.dtype = c.dtype;
  p.device = Device::cpu();
  p.batch = b;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kv_heads;
  p.head_dim = d;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = max_k;
  p.total_q = b * c.seqlen_q;
  p.total_k = h.cu_k.back();
  p.cu_seqlens_q = h.cu_q.data();
  p.cu_seqlens_k = h.cu_k.data();
  p.q = {const_cast<std::uint16_t*>(r.q.data()), {0, c.heads * d, d}};
  p.k = {h.k.data(), {0, c.kv_heads * d, d}};
  p.v = {h.v.data(), {0, c.kv_heads * d, d}};
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  p.softcap = c.softcap;
  p.window_left = c.window_left;
  p.window_right = c.causal ? 0 : c.window_right;
  p.alignment = MaskAlignment::bottom_right;
  return h;
}

// Runs the case (plan + forward on a non-default stream) and judges it; returns the failures.
// stages > 0: that K/V ring instead of the plan's (kv_cache_heuristics.hpp: the deep ring).
// combine: how the splits are merged, when not the plan's (kv_cache_heuristics.hpp: KVCombine).
// out_bits: when given, receives out's bits. load: those K/V loads instead of the plan's
// (kv_cache_heuristics.hpp: KVLoad; TMA only where it can serve the case).
std::string run_and_judge(const KVCase& c, int stages = 0, std::optional<cuda::KVCombine> combine = std::nullopt,
                          std::vector<std::uint16_t>* out_bits = nullptr,
                          std::optional<cuda::KVLoad> load = std::nullopt) {
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::string failures;
  try {
    const KVRun r = make_inputs(c);
    DeviceCall call(c, r, stream);
    cuda::KVCacheLaunch launch = cuda::kv_cache_plan(call.problem, r.cache.capacity);
    const bool other_ring = stages > 0 && stages != launch.stages;
    const bool other_load = load && *load != launch.load;
    if (other_ring) launch.stages = stages;
    if (other_load) launch.load = *load;
    if (other_ring || other_load) cuda::kv_cache_select_kernels(call.problem, launch);  // that kernel
    if (combine && launch.num_splits > 1) {
      launch.combine = *combine;
      if (*combine == cuda::KVCombine::separate) launch.counter_bytes = 0;
    }
    DeviceBuffer scratch(launch.scratch_bytes);
    cuda_ok(cudaMemset(scratch.data, 0x7f, launch.scratch_bytes), "poison the scratch");  // counters too
    cuda::kv_cache_forward(call.problem, launch, scratch.data);
    cuda_ok(cudaStreamSynchronize(stream), "kv_cache_forward");
    call.fetch_outputs();
    if (out_bits != nullptr) {
      out_bits->clear();
      for (std::int64_t i = 0; i < call.out.numel(); ++i) out_bits->push_back(static_cast<std::uint16_t>(call.out.bits(i)));
    }
    if (call.k.download<std::uint16_t>() != r.expected.k) failures += " k cache differs from the host's append;";
    if (call.v.download<std::uint16_t>() != r.expected.v) failures += " v cache differs from the host's append;";

    HostReference h = host_problem(c, r);
    const reference::ForwardResult ref = reference::forward_f64(h.p);
    const harness::NaiveForward naive = harness::naive_forward(h.p);
    std::vector<double> got_lse(ref.lse.size());
    for (std::int64_t s = 0; s < c.batch(); ++s)
      for (std::int64_t head = 0; head < c.heads; ++head)
        for (std::int64_t t = 0; t < c.seqlen_q; ++t)
          got_lse[static_cast<std::size_t>(head * h.p.total_q + s * c.seqlen_q + t)] =
              call.lse.get((s * c.heads + head) * c.seqlen_q + t);
    const harness::TensorCheck out = harness::judge_tensor("out", call.out, call.out.values(), ref.out, naive.out,
                                                           naive.out_terms, c.dtype, c.head_dim, false);
    const harness::TensorCheck lse = harness::judge_tensor("lse", call.lse, got_lse, ref.lse, naive.lse,
                                                           naive.lse_terms, c.dtype, c.head_dim, true);
    for (const harness::TensorCheck* t : {&out, &lse})
      if (!t->pass) failures += " " + t->to_string() + ";";
    if (!failures.empty()) failures += " kernel " + launch.kernel + " (" + launch.reason + ")";
  } catch (const Error& e) {
    failures += std::string(" threw: ") + e.what();
  }
  cudaStreamDestroy(stream);
  return failures;
}

std::vector<KVCase> chosen_cases(std::int64_t d) {
  std::vector<KVCase> cases;
  auto add = [&](KVCase c) {
    c.head_dim = d;
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  // Cache lengths 0, 1 and 17, ragged, every page size, decode with and without an append.
  for (std::int64_t page : {0, 1, 3, 16, 64}) {
    KVCase c;
    c.held = std::vector<std::int32_t>{0, 1, 17, 200};
    c.capacity = 300;
    c.page_size = page;
    add(c);
    c.seqlen_new = 1;
    c.held = std::vector<std::int32_t>{0, 1, 17, 299};  // the last append lands on the last slot
    c.dtype = DType::f16;
    add(c);
  }
  {  // GQA 7:1, speculative decoding (4 and 16 tokens appended and attended), page size 3.
    KVCase c;
    c.heads = 7;
    c.kv_heads = 1;
    c.held = std::vector<std::int32_t>{5, 0, 40};
    c.capacity = 90;
    c.page_size = 3;
    c.seqlen_q = 4;
    c.seqlen_new = 4;
    add(c);
    c.seqlen_q = 16;
    c.seqlen_new = 16;
    c.page_size = 16;
    add(c);
    c.seqlen_q = 1;
    c.seqlen_new = 0;
    c.held = std::vector<std::int32_t>{89, 17, 1};
    add(c);
  }
  {  // Window, soft-cap, MHA, a query longer than a short cache (rows before the first key).
    KVCase c;
    c.heads = 4;
    c.kv_heads = 4;
    c.held = std::vector<std::int32_t>{300, 17, 1000};
    c.capacity = 1024;
    c.page_size = 16;
    c.window_left = 37;
    c.seqlen_q = 4;
    add(c);
    c.softcap = 30.0f;
    c.window_left = -1;
    c.page_size = 64;
    add(c);
    c.held = std::vector<std::int32_t>{1, 2, 0};
    c.seqlen_q = 16;
    c.softcap = 0.0f;
    add(c);
  }
  {  // Not causal, a two-sided window over a paged cache of page size 1.
    KVCase c;
    c.causal = false;
    c.window_left = 20;
    c.window_right = 5;
    c.seqlen_q = 9;
    c.heads = 6;
    c.kv_heads = 2;
    c.held = std::vector<std::int32_t>{100, 31};
    c.capacity = 128;
    c.page_size = 1;
    add(c);
  }
  {  // Long caches: the heuristic splits the keys (combine kernel), paged whole-page tiles.
    KVCase c;
    c.heads = 32;
    c.kv_heads = 8;
    c.held = std::vector<std::int32_t>{5000, 3000};
    c.capacity = 5120;
    c.page_size = 256;
    add(c);
    c.page_size = 0;
    c.held = std::vector<std::int32_t>{5120, 1};
    add(c);
  }
  {  // Chunked prefill: 40 and 200 query tokens (128-row tiles), paged.
    KVCase c;
    c.heads = 4;
    c.kv_heads = 2;
    c.seqlen_q = 40;
    c.seqlen_new = 40;
    c.held = std::vector<std::int32_t>{0, 77, 13};
    c.capacity = 200;
    c.page_size = 3;
    add(c);
    c.seqlen_q = 200;
    c.seqlen_new = 0;
    c.held = std::vector<std::int32_t>{200, 150, 199};
    c.page_size = 64;
    add(c);
  }
  {  // Out-of-range seqlens and block-table values: nothing outside the cache touched, and no
     // append into a page of another sequence (bad entries are skipped, as on the CPU).
    KVCase c;
    c.held = std::vector<std::int32_t>{-5, 1000, 7};
    c.capacity = 100;
    c.page_size = 16;
    c.seqlen_new = 3;
    add(c);
    c.held = std::vector<std::int32_t>{-2, 1000, 7};  // sequence 0: tokens at -2, -1 skipped, 1 key
    add(c);
    c.bad_pages = true;
    add(c);
    c.seqlen_new = 0;
    add(c);
  }
  return cases;
}

// The K/V ring a chosen-cases test runs: the plan's, the reduced 2-stage ring
// (kv_reduced_stages) or the deep ring (kv_deep_stages) of the 16-row tile.
enum class Ring { planned, reduced, deep };

struct RingRun {
  Ring ring;
  const char* label;  // in the failure message, after the case
};
constexpr RingRun kRings[] = {{Ring::planned, ""}, {Ring::reduced, " reduced ring"}, {Ring::deep, " deep ring"}};

// Every chosen case of each built head dim on the ring: skipped for a head dim without that ring,
// and the deep ring only on the cases that use the 16-row tile.
void expect_chosen_cases_match(const RingRun& run) {
  for (int d : build_info().cuda_head_dims) {
    const int stages = run.ring == Ring::reduced ? cuda::kv_reduced_stages(d)
                       : run.ring == Ring::deep  ? cuda::kv_deep_stages(d)
                                                 : 0;  // 0: the plan's ring
    if (run.ring != Ring::planned && stages == 0) continue;
    for (const KVCase& c : chosen_cases(d)) {
      if (run.ring == Ring::deep && cuda::kv_row_tile(c.heads / c.kv_heads * c.seqlen_q, d).rows != 16) continue;
      // TMA loads have the default and the deep ring (kv_cache_launch.cuh): the reduced one runs cp.async.
      const std::optional<cuda::KVLoad> load =
          run.ring == Ring::reduced ? std::optional<cuda::KVLoad>(cuda::KVLoad::cp_async) : std::nullopt;
      const std::string failures = run_and_judge(c, stages, std::nullopt, nullptr, load);
      EXPECT_TRUE(failures.empty()) << c.describe() << run.label << ":" << failures;
    }
  }
}
#endif

TEST_F(CudaKVCacheKernel, ChosenCasesMatchFloat64) {
#if FASTATTN_TESTS_CUDA
  expect_chosen_cases_match(kRings[0]);
#endif
}

// The reduced 2-stage K/V ring (kv_reduced_stages: devices of 101,376 bytes per block, sm86 / sm89
// / sm120) on every chosen case whose tile has it.
TEST_F(CudaKVCacheKernel, ReducedRingMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  expect_chosen_cases_match(kRings[1]);
#endif
}

// The deep K/V ring (kv_deep_stages) of the 16-row tile on the chosen cases that use that tile.
TEST_F(CudaKVCacheKernel, DeepRingMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  expect_chosen_cases_match(kRings[2]);
#endif
}

// TMA loads (KVLoad::tma: sm90, the contiguous cache and pages of a multiple of the key tile;
// taken with FASTATTN_CUDA_KV_LOAD=tma, kv_cache_heuristics.hpp: kKVTmaByDefault) against the
// plan's cp.async on every chosen case TMA can serve, on the plan's ring and, for 16-row tiles,
// the deep one: both judged against float64, and the same bits (the same values reach the same
// MMAs in the same order; only the shared-memory layout differs). Skipped where TMA loads are not
// available (tma_loads_available: sm90 and a build with sm_90 code).
TEST_F(CudaKVCacheKernel, TmaLoadsMatchCpAsyncBitwise) {
#if FASTATTN_TESTS_CUDA
  int compared = 0;
  for (int d : build_info().cuda_head_dims) {
    if (!tma_loads_available(d)) continue;
    for (const KVCase& c : chosen_cases(d)) {
      if (c.page_size != 0 && c.page_size % cuda::kv_block_n(d) != 0) continue;  // pages TMA cannot load whole tiles of
      const bool sixteen_rows = cuda::kv_row_tile(c.heads / c.kv_heads * c.seqlen_q, d).rows == 16;
      std::vector<int> rings = {0};  // 0: the plan's
      if (sixteen_rows && cuda::kv_deep_stages(d) != 0) rings.push_back(cuda::kv_deep_stages(d));
      for (const int stages : rings) {
        std::vector<std::uint16_t> bits[2];
        const std::string tma = run_and_judge(c, stages, std::nullopt, &bits[0], cuda::KVLoad::tma);
        const std::string cp_async = run_and_judge(c, stages, std::nullopt, &bits[1], cuda::KVLoad::cp_async);
        const std::string ring = stages == 0 ? " plan's ring" : " deep ring";
        EXPECT_TRUE(tma.empty()) << c.describe() << ring << " TMA:" << tma;
        EXPECT_TRUE(cp_async.empty()) << c.describe() << ring << " cp.async:" << cp_async;
        EXPECT_TRUE(bits[0] == bits[1]) << c.describe() << ring << ": TMA and cp.async loads give different bits";
        ++compared;
      }
    }
  }
  if (compared == 0) GTEST_SKIP() << "no TMA loads here (sm90 devices, builds with sm_90 code)";
  std::printf("[ tma ] %d runs of chosen cases on TMA loads, bitwise equal to cp.async\n", compared);
#endif
}

// Forced split counts, more splits than key tiles included (empty splits write -inf partials).
TEST_F(CudaKVCacheKernel, ForcedSplitsMatchFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int splits : {2, 5, 128}) {
    const ScopedEnv env("FASTATTN_CUDA_NUM_SPLITS", std::to_string(splits));
    for (int d : build_info().cuda_head_dims) {
      KVCase c;
      c.head_dim = d;
      c.heads = 14;
      c.kv_heads = 2;
      c.held = std::vector<std::int32_t>{700, 0, 65};
      c.seqlen_q = 3;
      c.seqlen_new = 2;
      c.capacity = 768;
      c.page_size = splits == 5 ? 0 : 7;
      c.seed = 100 + static_cast<std::uint64_t>(splits);
      std::vector<std::uint16_t> bits[2];
      int i = 0;
      for (cuda::KVCombine combine : {cuda::KVCombine::fused, cuda::KVCombine::separate}) {
        const std::string failures = run_and_judge(c, 0, combine, &bits[i++]);
        EXPECT_TRUE(failures.empty()) << c.describe() << " splits=" << splits << " combine="
                                      << cuda::kv_combine_text(combine) << ":" << failures;
      }
      // Informational (both share kv_combine_row; nothing relies on it yet): whether the two
      // merges give the same bits, which would let eager calls and plans pick different ones.
      std::printf("[ combine ] d=%d splits=%d: fused and separate combine %s\n", d, splits,
                  bits[0] == bits[1] ? "bitwise equal" : "differ in bits");
    }
  }
#endif
}

// The fused combine (the last split of a row block merges them, counted by atomics) with many
// row blocks and splits: chunked prefill (128-row tiles, several row blocks per KV head), a
// ragged batch, GQA 7:1, window and softcap, paged with page sizes 1 and 3; plan-chosen and
// forced splits. The counters start poisoned in run_and_judge: the eager launch's memset zeroes
// them.
TEST_F(CudaKVCacheKernel, FusedCombineMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int splits : {0, 3, 17}) {
    std::optional<ScopedEnv> env;
    if (splits > 0) env.emplace("FASTATTN_CUDA_NUM_SPLITS", std::to_string(splits));
    for (int d : build_info().cuda_head_dims) {
      KVCase c;
      c.head_dim = d;
      c.heads = 14;
      c.kv_heads = 2;
      c.held = std::vector<std::int32_t>{1, 0, 17, 900};
      c.seqlen_q = splits == 17 ? 40 : 1;
      c.seqlen_new = splits == 17 ? 40 : 1;
      c.capacity = 1024;
      c.page_size = splits == 3 ? 1 : 3;
      c.window_left = splits == 3 ? 300 : -1;
      c.softcap = splits == 0 ? 30.0f : 0.0f;
      c.seed = 300 + static_cast<std::uint64_t>(splits);
      const std::string failures = run_and_judge(c, 0, cuda::KVCombine::fused);
      EXPECT_TRUE(failures.empty()) << c.describe() << " splits=" << splits << ":" << failures;
    }
  }
#endif
}

}  // namespace
}  // namespace fastattn::testing::kv_cache_kernel
