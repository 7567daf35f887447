// cooperative_test.cpp — the cooperative cache and step (fastattn/cooperative.hpp) on the CPU:
// the cost model's choices for given rates, the cache's bookkeeping (append across the
// device/host boundary, full cache, bad page ids), and the three-way split's exactness in the
// CPU emulation (the "GPU" parts run by the CPU kernels, through the same staging chunks and
// merge) against float64 and against one single call over the same data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype.hpp"
#include "fastattn/fastattn.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using testing::expect_error;

CooperativeRates rates(double pcie, double host, double cpu, double hbm = 4e12, double flops = 4e14,
                       double cpuflops = 1e12) {
  CooperativeRates r;
  r.pcie_h2d = pcie;
  r.host_read_during_dma = host;
  r.cpu_attention = cpu;
  r.gpu_hbm = hbm;
  r.gpu_attention_flops = flops;
  r.cpu_attention_flops = cpuflops;
  r.source = "given";
  return r;
}

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
      EXPECT_LE(4 * split.cpu_s, (split.device_s + split.streamed_s) * (1 + 1e-12))
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
  EXPECT_LE(4 * even.cpu_s, (even.device_s + even.streamed_s) * (1 + 1e-12)) << even.choice.reason;
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

// ---- the cache -----------------------------------------------------------------------------

// f32, 2 KV heads, d 4, pages of 4 tokens: a token is 8 floats, a page (K+V) 256 bytes.
CooperativeCacheConfig small_config(std::int64_t device_pages, std::int64_t host_pages, std::int64_t staging = 1) {
  CooperativeCacheConfig c;
  c.dtype = DType::f32;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.page_size = 4;
  c.max_sequences = 2;
  c.staging_pages = staging;
  c.host_pages = host_pages;
  c.device_budget_bytes = static_cast<std::size_t>((device_pages + (host_pages > 0 ? 2 * staging : 0)) * 256);
  return c;
}

std::vector<float> tokens(std::int64_t n, float base) {
  std::vector<float> v(static_cast<std::size_t>(n * 8));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

float key_at(const CooperativeKVCache& cache, std::int64_t seq, std::int64_t token, int element) {
  const std::int32_t page = cache.pages(seq)[static_cast<std::size_t>(token / 4)];
  const bool dev = cache.tier(page) == PageTier::device;
  const TensorView pool = cache.pool_k(dev ? PageTier::device : PageTier::host);
  const std::int64_t local = dev ? page : page - cache.device_pages();
  return static_cast<const float*>(pool.data)[(local * 4 + token % 4) * 8 + element];
}

TEST(CooperativeCache, AppendCrossesTheDeviceHostBoundary) {
  CooperativeKVCache cache(small_config(3, 5));
  EXPECT_EQ(cache.device_pages(), 3);
  EXPECT_EQ(cache.host_pages(), 5);
  EXPECT_EQ(cache.device_bytes(), 5u * 256u);  // 3 pages + 2 staging pages
  auto k = tokens(10, 0), v = tokens(10, 1000);
  cache.append(0, make_tensor(k.data(), DType::f32, {10, 2, 4}), make_tensor(v.data(), DType::f32, {10, 2, 4}));
  auto k2 = tokens(5, 5000), v2 = tokens(5, 6000);
  cache.append(0, make_tensor(k2.data(), DType::f32, {1, 5, 2, 4}), make_tensor(v2.data(), DType::f32, {1, 5, 2, 4}));
  EXPECT_EQ(cache.length(0), 15);
  ASSERT_EQ(cache.pages(0).size(), 4u);
  EXPECT_EQ(cache.tier(cache.pages(0)[2]), PageTier::device);
  EXPECT_EQ(cache.tier(cache.pages(0)[3]), PageTier::host);
  EXPECT_EQ(cache.free_pages(PageTier::device), 0);
  EXPECT_EQ(cache.free_pages(PageTier::host), 4);
  EXPECT_EQ(key_at(cache, 0, 9, 3), 9 * 8 + 3);           // first append, device page 2
  EXPECT_EQ(key_at(cache, 0, 11, 0), 5000 + 1 * 8);        // second append's token 1, device page 2
  EXPECT_EQ(key_at(cache, 0, 14, 7), 5000 + 4 * 8 + 7);    // host page
  cache.release(0);
  EXPECT_EQ(cache.free_pages(PageTier::device), 3);
  EXPECT_EQ(cache.free_pages(PageTier::host), 5);
}

TEST(CooperativeCache, FullCacheWritesNothing) {
  CooperativeKVCache cache(small_config(1, 1));
  auto k = tokens(6, 0);
  cache.append(1, make_tensor(k.data(), DType::f32, {6, 2, 4}), make_tensor(k.data(), DType::f32, {6, 2, 4}));
  auto more = tokens(3, 100);
  expect_error([&] { cache.append(1, make_tensor(more.data(), DType::f32, {3, 2, 4}), make_tensor(more.data(), DType::f32, {3, 2, 4})); },
               ErrorCode::out_of_memory, "cache is full");
  EXPECT_EQ(cache.length(1), 6);
  EXPECT_EQ(cache.pages(1).size(), 2u);
  EXPECT_EQ(key_at(cache, 1, 5, 0), 5 * 8);
  expect_error([&] { cache.append(2, make_tensor(more.data(), DType::f32, {3, 2, 4}), make_tensor(more.data(), DType::f32, {3, 2, 4})); },
               ErrorCode::invalid_argument, "seq: expected a sequence id in [0, 2)");
  expect_error([&] { cache.append(0, make_tensor(more.data(), DType::f32, {3, 4, 2}), make_tensor(more.data(), DType::f32, {3, 4, 2})); },
               ErrorCode::invalid_argument, "k: expected [.., 2, 4]");
  expect_error([] { CooperativeCacheConfig c = small_config(0, 4, 2); c.device_budget_bytes = 100; CooperativeKVCache bad(c); },
               ErrorCode::invalid_argument, "config.device_budget_bytes");
}

TEST(CooperativeCache, BadPageIds) {
  CooperativeKVCache cache(small_config(2, 2));
  expect_error([&] { cache.set_pages(0, {0, 7}, 8); }, ErrorCode::invalid_argument, "pages[1]: expected a page id in [0, 4)");
  expect_error([&] { cache.set_pages(0, {-1}, 4); }, ErrorCode::invalid_argument, "pages[0]");
  expect_error([&] { cache.set_pages(0, {1, 1}, 8); }, ErrorCode::invalid_argument, "page 1 twice");
  expect_error([&] { cache.set_pages(0, {1}, 5); }, ErrorCode::invalid_argument, "2 page ids for 5 tokens");
  expect_error([&] { (void)cache.tier(4); }, ErrorCode::invalid_argument, "page");
  EXPECT_EQ(cache.free_pages(PageTier::device), 2);
  // A shared prompt: both sequences hold page 2 (host); appending into it is refused.
  cache.set_pages(0, {0, 2}, 6);
  cache.set_pages(1, {1, 2}, 6);
  EXPECT_EQ(cache.free_pages(PageTier::host), 1);
  auto k = tokens(1, 0);
  expect_error([&] { cache.append(1, make_tensor(k.data(), DType::f32, {1, 2, 4}), make_tensor(k.data(), DType::f32, {1, 2, 4})); },
               ErrorCode::invalid_argument, "shared page");
  cache.release(0);
  EXPECT_EQ(cache.free_pages(PageTier::host), 1);  // still held by sequence 1
  cache.release(1);
  EXPECT_EQ(cache.free_pages(PageTier::host), 2);
}

// ---- the step in the CPU emulation ---------------------------------------------------------

struct Data {
  std::vector<std::uint16_t> k, v, q;  // bf16: [L, kvh, d], [L, kvh, d], [sq, h, d]
};

// float64 attention of q over keys 0..L-1 (all visible) then `n_new` new ones (causal among
// themselves, bottom-right, when causal): out [sq, h, d], lse [h, sq].
void reference(const Data& x, const std::vector<std::uint16_t>& kn, const std::vector<std::uint16_t>& vn,
               std::int64_t L, std::int64_t n_new, std::int64_t sq, std::int64_t h, std::int64_t kvh, std::int64_t d,
               bool causal, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(static_cast<std::size_t>(sq * h * d), 0.0);
  lse.assign(static_cast<std::size_t>(h * sq), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t t = 0; t < sq; ++t) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t g = hh / (h / kvh);
      std::vector<double> s;
      std::vector<const std::uint16_t*> vs;
      auto add = [&](const std::uint16_t* kr, const std::uint16_t* vr) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e) dot += bf16_to_float(x.q[static_cast<std::size_t>((t * h + hh) * d + e)]) * bf16_to_float(kr[e]);
        s.push_back(dot * scale);
        vs.push_back(vr);
      };
      for (std::int64_t j = 0; j < L; ++j) add(&x.k[static_cast<std::size_t>((j * kvh + g) * d)], &x.v[static_cast<std::size_t>((j * kvh + g) * d)]);
      for (std::int64_t j = 0; j < n_new; ++j) {
        if (causal && j > n_new - sq + t) continue;
        add(&kn[static_cast<std::size_t>((j * kvh + g) * d)], &vn[static_cast<std::size_t>((j * kvh + g) * d)]);
      }
      double m = -INFINITY;
      for (double e : s) m = std::max(m, e);
      double sum = 0;
      for (double e : s) sum += std::exp(e - m);
      for (std::size_t j = 0; j < s.size(); ++j) {
        const double p = std::exp(s[j] - m) / sum;
        for (std::int64_t e = 0; e < d; ++e) out[static_cast<std::size_t>((t * h + hh) * d + e)] += p * bf16_to_float(vs[j][e]);
      }
      lse[static_cast<std::size_t>(hh * sq + t)] = m + std::log(sum);
    }
  }
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& e : v) e = float_to_bf16(dist(gen) + 0.01f);
  return v;
}

double max_error(const std::vector<std::uint16_t>& out, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double x = bf16_to_float(out[i]);
    if (std::isnan(x)) return INFINITY;
    e = std::max(e, std::abs(x - ref[i]));
  }
  return e;
}

struct SplitCase {
  std::int64_t length, seqlen_q, device_pages, staging_pages;
  double stream_fraction;
  std::int64_t n_new;
};

class CooperativeSplitExact : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CooperativeSplitExact, ThreeWaysVsFloat64AndOneCall) {
  const SplitCase sc = GetParam();
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16;
  const std::int64_t L = sc.length, sq = sc.seqlen_q;
  std::mt19937 gen(static_cast<unsigned>(L * 31 + sq));
  Data x{random_bf16(static_cast<std::size_t>(L * kvh * d), gen), random_bf16(static_cast<std::size_t>(L * kvh * d), gen),
         random_bf16(static_cast<std::size_t>(sq * h * d), gen)};
  const std::int64_t page_bytes = 2 * ps * kvh * d * 2;
  CooperativeCacheConfig c;
  c.dtype = DType::bf16;
  c.num_kv_heads = kvh;
  c.head_dim = d;
  c.page_size = ps;
  c.staging_pages = sc.staging_pages;
  c.host_pages = (L + ps - 1) / ps;
  c.device_budget_bytes = static_cast<std::size_t>((sc.device_pages + 2 * sc.staging_pages) * page_bytes);
  CooperativeKVCache cache(c);
  // Appended in two uneven calls, so pages fill across a call boundary too.
  const std::int64_t first = L / 3;
  cache.append(0, make_tensor(x.k.data(), DType::bf16, {first, kvh, d}), make_tensor(x.v.data(), DType::bf16, {first, kvh, d}));
  cache.append(0, make_tensor(x.k.data() + first * kvh * d, DType::bf16, {L - first, kvh, d}),
               make_tensor(x.v.data() + first * kvh * d, DType::bf16, {L - first, kvh, d}));
  auto kn = random_bf16(static_cast<std::size_t>(std::max<std::int64_t>(sc.n_new, 1) * kvh * d), gen);
  auto vn = random_bf16(kn.size(), gen);

  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = sc.stream_fraction;
  o.attention.causal = true;
  o.rates = rates(50e9, 80e9, 60e9);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fc0);  // poisoned: NaN
  std::vector<float> lse(static_cast<std::size_t>(h * sq), NAN);
  const TensorView Q = make_tensor(x.q.data(), DType::bf16, {1, sq, h, d});
  std::optional<CooperativeNewKV> fresh;
  if (sc.n_new > 0) {
    fresh = CooperativeNewKV{make_tensor(kn.data(), DType::bf16, {1, sc.n_new, kvh, d}),
                             make_tensor(vn.data(), DType::bf16, {1, sc.n_new, kvh, d})};
  }
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, sq, h, d}),
                                                    make_tensor(lse.data(), DType::f32, {1, h, sq}), fresh, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  EXPECT_EQ(split.device_pages, std::min(sc.device_pages, c.host_pages));
  if (sc.stream_fraction > 0 && sc.stream_fraction < 1 && c.host_pages - sc.device_pages >= 2) {
    EXPECT_GT(split.streamed_pages, 0);
    EXPECT_GT(split.cpu_pages, 0);
  }
  std::vector<double> ref_out, ref_lse;
  reference(x, kn, vn, L, sc.n_new, sq, h, kvh, d, true, ref_out, ref_lse);

  // One single call over the same data: all pages of one paged cache, new tokens appended in it.
  std::vector<std::uint16_t> k_all(x.k), v_all(x.v);
  k_all.insert(k_all.end(), kn.begin(), kn.begin() + sc.n_new * kvh * d);
  v_all.insert(v_all.end(), vn.begin(), vn.begin() + sc.n_new * kvh * d);
  const std::int64_t total = L + sc.n_new;
  std::vector<std::uint16_t> one(out.size());
  std::vector<float> one_lse(lse.size());
  AttentionOptions a;
  a.causal = true;
  forward(Q, make_tensor(k_all.data(), DType::bf16, {1, total, kvh, d}), make_tensor(v_all.data(), DType::bf16, {1, total, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, sq, h, d}), make_tensor(one_lse.data(), DType::f32, {1, h, sq}), a);

  const double err = max_error(out, ref_out);
  const double err_one = max_error(one, ref_out);
  double lse_err = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(static_cast<double>(lse[i]) - ref_lse[i]));
  EXPECT_LE(err, 2 * err_one + 1e-3) << choice.reason << " err " << err << " one call " << err_one;
  EXPECT_LE(lse_err, 1e-4) << choice.reason;
  RecordProperty("err_vs_f64", std::to_string(err));
  RecordProperty("one_call_err_vs_f64", std::to_string(err_one));
}

INSTANTIATE_TEST_SUITE_P(Cases, CooperativeSplitExact,
                         ::testing::Values(SplitCase{1000, 1, 20, 3, 0.5, 0},   // 63 pages: 20 / 21 / 22, 7 chunks
                                           SplitCase{1000, 1, 20, 3, 0.5, 1},   // a decode token not yet appended
                                           SplitCase{257, 4, 5, 2, 0.3, 4},     // speculative: 4 causal drafts
                                           SplitCase{65, 1, 1, 1, 1.0, 0},      // all host pages streamed
                                           SplitCase{63, 7, 0, 2, 0.0, 7},      // no device page, CPU alone
                                           SplitCase{7, 1, 4, 1, 0.5, 0},       // fits on the device
                                           SplitCase{4096, 16, 64, 8, 0.6, 0},
                                           // prefill (seqlen_q > 16): forward() over the device run and the chunks
                                           SplitCase{1000, 65, 20, 3, 0.5, 65},  // chunked prefill: own chunk causal
                                           SplitCase{999, 100, 13, 5, 0.4, 0}));

// Prefill with the forward kernel over fragmented device pages (a caller's page table, pages
// out of order: several device runs) split three ways: vs float64 and vs one forward() call.
// Parts 1 and 2 write q's dtype (forward's out), one rounding per run or chunk before the f32
// merge, so the bound is the harness's 2x of a same-precision call (plus a floor), not 1x.
TEST(CooperativePrefill, ForwardKernelOverDeviceRunsAndChunks) {
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16, L = 1000, sq = 33, pages = (L + ps - 1) / ps;  // 63 pages
  std::mt19937 gen(17);
  Data x{random_bf16(static_cast<std::size_t>(L * kvh * d), gen), random_bf16(static_cast<std::size_t>(L * kvh * d), gen),
         random_bf16(static_cast<std::size_t>(sq * h * d), gen)};
  CooperativeCacheConfig c;
  c.dtype = DType::bf16;
  c.num_kv_heads = kvh;
  c.head_dim = d;
  c.page_size = ps;
  c.staging_pages = 8;
  c.host_pages = pages;
  c.device_budget_bytes = static_cast<std::size_t>((20 + 2 * 8) * 2 * ps * kvh * d * 2);  // 20 device pages
  CooperativeKVCache cache(c);
  // Token-order page table: device pages 3,4,5, 0,1, 9..19 (3 runs) interleaved with host pages.
  std::vector<std::int32_t> table;
  for (std::int32_t p : {3, 4, 5, 0, 1}) table.push_back(p);
  for (std::int32_t p = 20; p < 50; ++p) table.push_back(p);
  for (std::int32_t p = 9; p < 20; ++p) table.push_back(p);
  for (std::int32_t p = 50; static_cast<std::int64_t>(table.size()) < pages; ++p) table.push_back(p);
  cache.set_pages(0, table, L);
  for (std::int64_t j = 0; j < pages; ++j) {  // the keys in token order, through the page table
    const std::int64_t n = std::min(ps, L - j * ps);
    const TensorView kp = cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? cache.pool_k(PageTier::device) : cache.pool_k(PageTier::host);
    const TensorView vp = cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? cache.pool_v(PageTier::device) : cache.pool_v(PageTier::host);
    const std::int64_t local = table[static_cast<std::size_t>(j)] - (cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? 0 : cache.device_pages());
    const std::size_t bytes = static_cast<std::size_t>(n * kvh * d * 2), at = static_cast<std::size_t>(local * ps * kvh * d * 2);
    std::memcpy(static_cast<char*>(kp.data) + at, x.k.data() + j * ps * kvh * d, bytes);
    std::memcpy(static_cast<char*>(vp.data) + at, x.v.data() + j * ps * kvh * d, bytes);
  }
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.6;
  o.rates = rates(50e9, 80e9, 60e9);
  const TensorView Q = make_tensor(x.q.data(), DType::bf16, {1, sq, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fc0);  // poisoned: NaN
  std::vector<float> lse(static_cast<std::size_t>(h * sq), NAN);
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, sq, h, d}),
                                                    make_tensor(lse.data(), DType::f32, {1, h, sq}), std::nullopt, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  EXPECT_EQ(split.gpu_kernel, CooperativeKernel::forward);
  EXPECT_EQ(split.device_pages, 16);
  EXPECT_EQ(split.streamed_pages, 28);  // 0.6 x 47 host pages: chunks of 8, 8, 8, 4
  EXPECT_EQ(split.cpu_pages, 19);
  EXPECT_NE(choice.reason.find("forward kernel over each run of consecutive device pages"), std::string::npos) << choice.reason;
  std::vector<double> ref_out, ref_lse;
  reference(x, {}, {}, L, 0, sq, h, kvh, d, false, ref_out, ref_lse);
  std::vector<std::uint16_t> one(out.size(), 0x7fc0);
  forward(Q, make_tensor(x.k.data(), DType::bf16, {1, L, kvh, d}), make_tensor(x.v.data(), DType::bf16, {1, L, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, sq, h, d}));
  const double err = max_error(out, ref_out), err_one = max_error(one, ref_out);
  double lse_err = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(static_cast<double>(lse[i]) - ref_lse[i]));
  EXPECT_LE(err, 2 * err_one + 1e-3) << "err " << err << " one call " << err_one << "; " << choice.reason;
  EXPECT_LE(lse_err, 1e-4);
  std::printf("prefill split / one call max error: %.4f (%.3e / %.3e)\n", err / err_one, err, err_one);
}

// Issue 18's exactness bar: the three-way split's max error vs float64 no larger than that of one
// single-device call (forward() over the same keys), bf16 and f16, several seeds and sizes.
// Each part writes its partial in f32 (PartialRunner) and the step rounds once, after the merge,
// so both results are one rounding of (nearly) the same f32 value and the mean error is no
// larger. The max error can still differ by a fraction of an ulp: an f32 value a few f32 ulps
// from a rounding tie may round the other way than the single call's did (measured: max-error
// ratio 1.00 in 9 of these 10 cases, 1.12 in bf16 L 2047 sq 4 seed 4; mean-error ratio
// 0.96-1.00). Bounds: mean <= 1.01x, max <= 1.25x.
struct BarCase {
  DType dtype;
  std::int64_t length, seqlen_q;
  unsigned seed;
};

class CooperativeExactnessBar : public ::testing::TestWithParam<BarCase> {};

TEST_P(CooperativeExactnessBar, NoLargerThanOneCall) {
  const BarCase bc = GetParam();
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16;
  const std::int64_t L = bc.length, sq = bc.seqlen_q;
  const DType dt = bc.dtype;
  std::mt19937 gen(bc.seed * 7919u + static_cast<unsigned>(L));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto random = [&](std::int64_t n) {
    std::vector<std::uint16_t> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = dt == DType::bf16 ? float_to_bf16(dist(gen) + 0.01f) : float_to_f16(dist(gen) + 0.01f);
    return v;
  };
  const auto k = random(L * kvh * d), v = random(L * kvh * d), q = random(sq * h * d);
  auto at = [&](const std::vector<std::uint16_t>& x, std::int64_t i) { return load_element(x.data(), dt, i); };
  const std::int64_t pages = (L + ps - 1) / ps, page_bytes = 2 * ps * kvh * d * 2;
  CooperativeCacheConfig c;
  c.dtype = dt;
  c.num_kv_heads = kvh;
  c.head_dim = d;
  c.page_size = ps;
  c.staging_pages = 3;
  c.host_pages = pages;
  const std::int64_t device_pages = pages / 3;
  c.device_budget_bytes = static_cast<std::size_t>((device_pages + 2 * c.staging_pages) * page_bytes);
  CooperativeKVCache cache(c);
  cache.append(0, make_tensor(const_cast<std::uint16_t*>(k.data()), dt, {L, kvh, d}),
               make_tensor(const_cast<std::uint16_t*>(v.data()), dt, {L, kvh, d}));
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.5;
  o.rates = rates(50e9, 80e9, 60e9);
  const TensorView Q = make_tensor(const_cast<std::uint16_t*>(q.data()), dt, {1, sq, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fff);  // poisoned: NaN in both dtypes
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), dt, {1, sq, h, d}), std::nullopt,
                                                    std::nullopt, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  ASSERT_GT(split.device_pages, 0);
  ASSERT_GT(split.streamed_pages, 0);
  ASSERT_GT(split.cpu_pages, 0);
  std::vector<std::uint16_t> one(out.size(), 0x7fff);
  forward(Q, make_tensor(const_cast<std::uint16_t*>(k.data()), dt, {1, L, kvh, d}),
          make_tensor(const_cast<std::uint16_t*>(v.data()), dt, {1, L, kvh, d}), make_tensor(one.data(), dt, {1, sq, h, d}));
  // float64 reference.
  double err = 0, err_one = 0, sum_err = 0, sum_one = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(static_cast<std::size_t>(L)), o64(static_cast<std::size_t>(d));
  for (std::int64_t t = 0; t < sq; ++t) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t g = hh / (h / kvh);
      double m = -INFINITY;
      for (std::int64_t j = 0; j < L; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e) dot += at(q, (t * h + hh) * d + e) * at(k, (j * kvh + g) * d + e);
        s[static_cast<std::size_t>(j)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - m));
      std::fill(o64.begin(), o64.end(), 0.0);
      for (std::int64_t j = 0; j < L; ++j) {
        for (std::int64_t e = 0; e < d; ++e) o64[static_cast<std::size_t>(e)] += s[static_cast<std::size_t>(j)] / sum * at(v, (j * kvh + g) * d + e);
      }
      for (std::int64_t e = 0; e < d; ++e) {
        const std::int64_t i = (t * h + hh) * d + e;
        const double x = at(out, i), y = at(one, i);
        err = std::isnan(x) ? INFINITY : std::max(err, std::abs(x - o64[static_cast<std::size_t>(e)]));
        err_one = std::isnan(y) ? INFINITY : std::max(err_one, std::abs(y - o64[static_cast<std::size_t>(e)]));
        sum_err += std::abs(x - o64[static_cast<std::size_t>(e)]);
        sum_one += std::abs(y - o64[static_cast<std::size_t>(e)]);
      }
    }
  }
  EXPECT_LE(sum_err, sum_one * 1.01) << "mean error";
  EXPECT_LE(err, err_one * 1.25) << to_string(dt) << " L " << L << " sq " << sq << " seed " << bc.seed
                                       << ": split err " << err << ", one call " << err_one << "; " << choice.reason;
  EXPECT_GT(err_one, 0.0);
  RecordProperty("split_over_one_call", std::to_string(err / err_one));
  std::printf("split / one call error, %s L %ld sq %ld seed %u: max %.4f mean %.4f\n", to_string(dt), static_cast<long>(L), static_cast<long>(sq), bc.seed, err / err_one, sum_err / sum_one);
}

INSTANTIATE_TEST_SUITE_P(Cases, CooperativeExactnessBar,
                         ::testing::Values(BarCase{DType::bf16, 1000, 1, 1}, BarCase{DType::bf16, 1000, 1, 2},
                                           BarCase{DType::bf16, 4096, 1, 3}, BarCase{DType::bf16, 2047, 4, 4},
                                           BarCase{DType::bf16, 777, 16, 5}, BarCase{DType::f16, 1000, 1, 1},
                                           BarCase{DType::f16, 1000, 1, 2}, BarCase{DType::f16, 4096, 1, 3},
                                           BarCase{DType::f16, 2047, 4, 4}, BarCase{DType::f16, 777, 16, 5}));

// The step object (CooperativeStep): planned once, run as the sequence grows across the
// device/host boundary (the split moves: device pages first, then host pages streamed and on
// the CPU); every run bitwise equal to a one-shot cooperative_attention on the same cache.
TEST(CooperativeStep, ReusedAsTheSequenceGrows) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16, step_tokens = 40;
  std::mt19937 gen(11);
  CooperativeCacheConfig c;
  c.dtype = DType::bf16;
  c.num_kv_heads = kvh;
  c.head_dim = d;
  c.page_size = ps;
  c.staging_pages = 2;
  c.host_pages = 24;
  const std::int64_t page_bytes = 2 * ps * kvh * d * 2;
  c.device_budget_bytes = static_cast<std::size_t>((6 + 2 * c.staging_pages) * page_bytes);
  CooperativeKVCache cache(c);
  const auto q = random_bf16(static_cast<std::size_t>(h * d), gen);
  const TensorView Q = make_tensor(const_cast<std::uint16_t*>(q.data()), DType::bf16, {1, 1, h, d});
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.5;
  o.rates = rates(50e9, 80e9, 60e9);
  CooperativeStep step(Q, cache, o);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(h * d)), once(out.size());
  std::vector<float> lse(static_cast<std::size_t>(h)), lse_once(lse.size());
  bool saw_all_three = false;
  for (int i = 0; i < 10; ++i) {
    const auto k = random_bf16(static_cast<std::size_t>(step_tokens * kvh * d), gen);
    const auto v = random_bf16(k.size(), gen);
    cache.append(0, make_tensor(const_cast<std::uint16_t*>(k.data()), DType::bf16, {step_tokens, kvh, d}),
                 make_tensor(const_cast<std::uint16_t*>(v.data()), DType::bf16, {step_tokens, kvh, d}));
    std::fill(out.begin(), out.end(), 0x7fc0);
    std::fill(once.begin(), once.end(), 0x7fc0);
    step.run(Q, 0, make_tensor(out.data(), DType::bf16, {1, 1, h, d}), make_tensor(lse.data(), DType::f32, {1, h, 1}));
    cooperative_attention(Q, cache, 0, make_tensor(once.data(), DType::bf16, {1, 1, h, d}),
                          make_tensor(lse_once.data(), DType::f32, {1, h, 1}), std::nullopt, o);
    EXPECT_EQ(0, std::memcmp(out.data(), once.data(), out.size() * 2)) << "step " << i;
    EXPECT_EQ(0, std::memcmp(lse.data(), lse_once.data(), lse.size() * 4)) << "step " << i;
    for (std::uint16_t x : out) ASSERT_FALSE(std::isnan(bf16_to_float(x))) << "step " << i;
    const CooperativeSplit split = step.plan(0);
    EXPECT_EQ(split.device_pages, std::min<std::int64_t>(6, (cache.length(0) + ps - 1) / ps));
    saw_all_three = saw_all_three || (split.device_pages > 0 && split.streamed_pages > 0 && split.cpu_pages > 0);
  }
  EXPECT_TRUE(saw_all_three);
  // A q of another shape than the step's.
  std::vector<std::uint16_t> q2(static_cast<std::size_t>(2 * h * d), 0x3f80), o2(q2.size());
  expect_error([&] { step.run(make_tensor(q2.data(), DType::bf16, {1, 2, h, d}), 0, make_tensor(o2.data(), DType::bf16, {1, 2, h, d})); },
               ErrorCode::invalid_argument, "q: expected shape [1, 1, 4, 64] (the step's)");
}

TEST(CooperativeStep, PartsAloneAndErrors) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16, L = 100;
  std::mt19937 gen(3);
  auto k = random_bf16(static_cast<std::size_t>(L * kvh * d), gen), q = random_bf16(static_cast<std::size_t>(h * d), gen);
  CooperativeCacheConfig c;
  c.dtype = DType::bf16;
  c.num_kv_heads = kvh;
  c.head_dim = d;
  c.page_size = ps;
  c.staging_pages = 1;
  c.host_pages = 8;
  c.device_budget_bytes = static_cast<std::size_t>(4 * 2 * ps * kvh * d * 2);  // 2 device pages + 2 staging
  CooperativeKVCache cache(c);
  cache.append(0, make_tensor(k.data(), DType::bf16, {L, kvh, d}), make_tensor(k.data(), DType::bf16, {L, kvh, d}));
  const TensorView Q = make_tensor(q.data(), DType::bf16, {1, 1, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(h * d));
  std::vector<float> lse(static_cast<std::size_t>(h));
  CooperativeOptions o;
  o.rates = rates(50e9, 80e9, 60e9);
  o.parts = 1;  // the device part alone: attention over its 32 keys
  cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, 1, h, d}), make_tensor(lse.data(), DType::f32, {1, h, 1}), std::nullopt, o);
  std::vector<std::uint16_t> one(out.size());
  std::vector<float> one_lse(lse.size());
  forward(Q, make_tensor(k.data(), DType::bf16, {1, 32, kvh, d}), make_tensor(k.data(), DType::bf16, {1, 32, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, 1, h, d}), make_tensor(one_lse.data(), DType::f32, {1, h, 1}));
  for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], one_lse[i], 1e-4);
  o.parts = 7;
  o.attention.window_left = 8;
  const TensorView O = make_tensor(out.data(), DType::bf16, {1, 1, h, d});
  expect_error([&] { cooperative_attention(Q, cache, 0, O, std::nullopt, std::nullopt, o); }, ErrorCode::unsupported,
               "options.attention.window_left/right");
  o.attention.window_left = -1;
  expect_error([&] { cooperative_attention(Q, cache, 1, O, std::nullopt, std::nullopt, o); }, ErrorCode::invalid_argument,
               "seq: expected a sequence id in [0, 1)");
  expect_error([&] { cooperative_attention(make_tensor(q.data(), DType::f16, {1, 1, h, d}), cache, 0, O, std::nullopt, std::nullopt, o); },
               ErrorCode::invalid_argument, "q: expected dtype bf16 (the cache's)");
  expect_error([&] { cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, 1, h / 2, d}), std::nullopt, std::nullopt, o); },
               ErrorCode::invalid_argument, "out: expected shape");
  o.parts = 0;
  expect_error([&] { cooperative_attention(Q, cache, 0, O, std::nullopt, std::nullopt, o); }, ErrorCode::invalid_argument, "options.parts");
}

}  // namespace
}  // namespace fastattn
