// bench_coop.cpp — `fastattn bench --cooperative`: the CPU-GPU cooperative step (issue 18,
// docs/long-context.md). One sequence of --context cached tokens; the layer's device budget is
// --device-budget / --layers (memory-capped mode: the budget of the whole model's KV cache,
// shared by its layers, is what sends pages to the host). Per strategy one JSON row: the median
// step time, the split and its reason, the device memory high-water mark during the steps
// (CUDA: cudaMemGetInfo polled on a thread, minus the free memory before the cache existed).
// --check adds the error vs float64 of the step and of one single-device call on the same data.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>
#if FASTATTN_CLI_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "commands.hpp"
#include "common/dtype.hpp"
#include "fastattn/fastattn.hpp"

namespace fastattn::cli {

namespace {

using Json = nlohmann::json;

// Device bytes in use (total - free); 0 without CUDA.
std::size_t device_used() {
#if FASTATTN_CLI_HAVE_CUDA
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) return total_b - free_b;
#endif
  return 0;
}

struct Buffer {  // device or host memory for q / out / lse / new tokens
  Device device;
  void* p = nullptr;
  Buffer(Device d, std::size_t bytes) : device(d) {
#if FASTATTN_CLI_HAVE_CUDA
    if (d.type == DeviceType::cuda) {
      if (cudaMalloc(&p, bytes) != cudaSuccess) throw Error(ErrorCode::out_of_memory, "bench: cudaMalloc");
      return;
    }
#endif
    p = std::malloc(bytes);
  }
  ~Buffer() {
#if FASTATTN_CLI_HAVE_CUDA
    if (device.type == DeviceType::cuda) {
      (void)cudaFree(p);
      return;
    }
#endif
    std::free(p);
  }
  void upload(const void* src, std::size_t bytes) {
#if FASTATTN_CLI_HAVE_CUDA
    if (device.type == DeviceType::cuda) {
      (void)cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice);
      return;
    }
#endif
    std::memcpy(p, src, bytes);
  }
  void download(void* dst, std::size_t bytes) const {
#if FASTATTN_CLI_HAVE_CUDA
    if (device.type == DeviceType::cuda) {
      (void)cudaMemcpy(dst, p, bytes, cudaMemcpyDeviceToHost);
      return;
    }
#endif
    std::memcpy(dst, p, bytes);
  }
};

std::vector<std::uint16_t> random_bf16(std::size_t n, unsigned seed) {
  std::vector<std::uint16_t> v(n);
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& x : v) x = float_to_bf16(dist(gen) + 0.01f);
  return v;
}

// float64 attention of q [heads, d] (one token) over k, v [L, kvh, d] bf16: out [heads, d].
std::vector<double> reference_decode(const std::vector<std::uint16_t>& q, const std::vector<std::uint16_t>& k,
                                     const std::vector<std::uint16_t>& v, std::int64_t L, std::int64_t heads,
                                     std::int64_t kvh, std::int64_t d) {
  std::vector<double> out(static_cast<std::size_t>(heads * d), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
#pragma omp parallel for
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / (heads / kvh);
    std::vector<double> s(static_cast<std::size_t>(L));
    double m = -INFINITY;
    for (std::int64_t j = 0; j < L; ++j) {
      double dot = 0;
      for (std::int64_t e = 0; e < d; ++e) {
        dot += static_cast<double>(bf16_to_float(q[static_cast<std::size_t>(h * d + e)])) *
               bf16_to_float(k[static_cast<std::size_t>((j * kvh + g) * d + e)]);
      }
      s[static_cast<std::size_t>(j)] = dot * scale;
      m = std::max(m, dot * scale);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (std::int64_t j = 0; j < L; ++j) {
      const double p = s[static_cast<std::size_t>(j)] / sum;
      for (std::int64_t e = 0; e < d; ++e) {
        out[static_cast<std::size_t>(h * d + e)] += p * bf16_to_float(v[static_cast<std::size_t>((j * kvh + g) * d + e)]);
      }
    }
  }
  return out;
}

double max_error(const std::vector<std::uint16_t>& out, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double x = bf16_to_float(out[i]);
    e = std::isnan(x) ? INFINITY : std::max(e, std::abs(x - ref[i]));
  }
  return e;
}

// Mean |out - ref|: the max compares single elements, where an f32 value a few ulps from a
// rounding tie may round either way; the mean says whether one result is less exact overall.
double mean_error(const std::vector<std::uint16_t>& out, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < out.size(); ++i) e += std::abs(static_cast<double>(bf16_to_float(out[i])) - ref[i]);
  return out.empty() ? 0.0 : e / static_cast<double>(out.size());
}

}  // namespace

int run_cooperative_bench(const BenchArgs& a) {
  const std::int64_t heads = a.heads.empty() ? 32 : a.heads[0];
  const std::int64_t kvh = a.kv_heads.empty() ? 8 : a.kv_heads[0];
  const std::int64_t d = a.head_dim.empty() ? 128 : a.head_dim[0];
  const std::int64_t sq = a.seqlen_q.empty() ? 1 : a.seqlen_q[0];
  const std::int64_t L = a.coop_context, ps = a.coop_page_size;
  const Device device = a.device == "cuda" ? Device::cuda(0) : Device::cpu();
  const int threads = a.threads.empty() ? 0 : a.threads[0];
  const std::size_t budget = parse_memory_size(a.coop_budget, "--device-budget") / static_cast<std::size_t>(std::max<std::int64_t>(1, a.coop_layers));
  const std::size_t page_bytes = static_cast<std::size_t>(2 * ps * kvh * d * 2);
  const std::int64_t pages = (L + ps - 1) / ps;
  std::vector<std::string> strategies = a.coop_strategies;
  if (strategies.empty()) strategies = {"auto", "device", "streamed", "cpu", "stream_all", "cpu_all"};

  const std::size_t used0 = device_used();
  CooperativeCacheConfig config;
  config.dtype = DType::bf16;
  config.num_kv_heads = kvh;
  config.head_dim = d;
  config.page_size = ps;
  config.device = device;
  config.device_budget_bytes = budget;
  // Staging, counted in the layer's budget (device pages = budget - both buffers). Decode: 32 MiB
  // of K+V per buffer, at most 1/8 of a small budget (a decode chunk is copy-bound; its size only
  // needs to amortise a launch). Prefill (seqlen_q > 16, the forward kernel): 8192 tokens per
  // buffer, at most half the budget each: every chunk is one forward call plus one f32 merge pass
  // over the (seqlen_q x heads x d) partial, so the chunk must be long for the merge and the
  // call's fixed costs to stay a few percent of its compute (Llama-3-8B, 8192 queries: a chunk of
  // 8192 keys is ~1.1 TFLOP, ~2 ms on an H200; its merge moves ~0.3 GB, ~0.1 ms).
  const bool prefill = cooperative_gpu_kernel(sq) == CooperativeKernel::forward;
  // --staging-tokens overrides the default (longer prefill chunks: fewer forward calls and merges).
  const std::size_t default_staging =
      a.coop_staging_tokens > 0 ? static_cast<std::size_t>((a.coop_staging_tokens + ps - 1) / ps)
      : prefill                 ? static_cast<std::size_t>((8192 + ps - 1) / ps)
                                : std::max<std::size_t>(1, (std::size_t{32} << 20) / page_bytes);
  const std::size_t staging_cap = prefill ? budget / 2 / page_bytes : budget / 8 / page_bytes;
  config.staging_pages = static_cast<std::int64_t>(std::max<std::size_t>(1, std::min(default_staging, staging_cap)));
  config.host_pages = pages;  // room for every page on the host; the device takes what the budget allows first
  const auto t_setup = std::chrono::steady_clock::now();
  CooperativeKVCache cache(config);
  // Fill: random bf16 tokens, 64k at a time from one random block (kept whole for --check).
  const std::int64_t block = std::min<std::int64_t>(L, 65536);
  const auto kb = random_bf16(static_cast<std::size_t>(block * kvh * d), 1);
  const auto vb = random_bf16(kb.size(), 2);
  for (std::int64_t t = 0; t < L; t += block) {
    const std::int64_t n = std::min(block, L - t);
    cache.append(0, make_tensor(const_cast<std::uint16_t*>(kb.data()), DType::bf16, {n, kvh, d}),
                 make_tensor(const_cast<std::uint16_t*>(vb.data()), DType::bf16, {n, kvh, d}));
  }
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_setup).count();
  const auto qh = random_bf16(static_cast<std::size_t>(sq * heads * d), 3);
  Buffer q(device, qh.size() * 2), out(device, qh.size() * 2), lse(device, static_cast<std::size_t>(heads * sq) * 4);
  q.upload(qh.data(), qh.size() * 2);
  const TensorView Q = make_tensor(q.p, DType::bf16, {1, sq, heads, d}, device);
  const TensorView O = make_tensor(out.p, DType::bf16, {1, sq, heads, d}, device);
  const TensorView Lse = make_tensor(lse.p, DType::f32, {1, heads, sq}, device);

  Json report;
  report["context"] = L;
  report["seqlen_q"] = sq;
  report["heads"] = heads;
  report["kv_heads"] = kvh;
  report["head_dim"] = d;
  report["page_size"] = ps;
  report["device_budget_bytes_per_layer"] = budget;
  report["layers"] = a.coop_layers;
  report["device_pages"] = cache.device_pages();
  report["host_pages_used"] = std::max<std::int64_t>(0, pages - cache.device_pages());
  report["cache_device_bytes"] = cache.device_bytes();
  report["staging_pages"] = config.staging_pages;
  report["gpu_kernel"] = to_string(cooperative_gpu_kernel(sq));
  report["kv_bytes"] = static_cast<std::size_t>(L) * page_bytes / static_cast<std::size_t>(ps);
  report["setup_s"] = setup_s;
  CooperativeOptions base;
  base.cpu_threads = threads;
  base.refine_rates = !a.coop_fixed_rates;
  const CooperativeRates rates = measure_cooperative_rates(device, threads);
  base.rates = rates;
  report["rates"] = {{"pcie_h2d", rates.pcie_h2d}, {"host_read_during_dma", rates.host_read_during_dma},
                     {"cpu_attention", rates.cpu_attention}, {"gpu_hbm", rates.gpu_hbm},
                     {"gpu_attention_flops", rates.gpu_attention_flops}, {"cpu_attention_flops", rates.cpu_attention_flops},
                     {"source", rates.source}};
  std::size_t high_water = 0;
  // The cache's tokens in order: the random block repeated, as appended (for --check and the
  // "forward" anchor).
  auto all_tokens = [&](const std::vector<std::uint16_t>& b) {
    std::vector<std::uint16_t> all;
    for (std::int64_t t = 0; t < L; t += block) {
      all.insert(all.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(std::min(block, L - t) * kvh * d));
    }
    return all;
  };
  for (const std::string& name : strategies) {
    if (name == "forward") {
      // Anchor: one forward() call over all L keys, contiguous on the device (what the cooperative
      // step's parts 1 and 2 run per device run / chunk for prefill), same q, same process.
      const auto k_all = all_tokens(kb), v_all = all_tokens(vb);
      Buffer kd(device, k_all.size() * 2), vd(device, v_all.size() * 2);
      kd.upload(k_all.data(), k_all.size() * 2);
      vd.upload(v_all.data(), v_all.size() * 2);
      const TensorView K = make_tensor(kd.p, DType::bf16, {1, L, kvh, d}, device);
      const TensorView V = make_tensor(vd.p, DType::bf16, {1, L, kvh, d}, device);
      std::vector<double> times;
      const int warm = std::max(1, a.warmup), reps = std::max(3, a.repeats);
      for (int i = 0; i < warm + reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        forward(Q, K, V, O, Lse);
#if FASTATTN_CLI_HAVE_CUDA
        if (device.type == DeviceType::cuda && cudaDeviceSynchronize() != cudaSuccess) {
          fmt::print(stderr, "fastattn bench --cooperative: forward: a CUDA error\n");
          return kExitFailed;
        }
#endif
        if (i >= warm) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      fmt::print("{:>10}  {:9.3f} ms  (one forward() over {} contiguous keys)\n", name, times[times.size() / 2] * 1e3, L);
      report["rows"].push_back({{"strategy", name}, {"median_ms", times[times.size() / 2] * 1e3}, {"min_ms", times.front() * 1e3},
                                {"repeats", reps}, {"reason", plan_forward(Q, K, V, O, Lse).reason}});
      continue;
    }
    CooperativeOptions o = base;
    if (name == "device") o.parts = 1;
    else if (name == "streamed") o.parts = 2;
    else if (name == "cpu") o.parts = 4;
    else if (name == "stream_all") o.policy = SplitPolicy::stream_all;
    else if (name == "cpu_all") o.policy = SplitPolicy::cpu_all;
    else if (name != "auto") {
      fmt::print(stderr, "fastattn bench: --strategies: expected auto, device, streamed, cpu, stream_all, cpu_all or forward, got {}\n", name);
      return kExitUsage;
    }
    CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
    // The step object is planned (plans, scratch, staging, copy stream) outside the timed loop,
    // as a decode loop keeps it; its high-water mark counts (the sampler runs from here to the
    // end of the warm-up runs: a run allocates nothing, and the sampler's thread and device
    // queries stay out of the timed runs, whose CPU part has every core).
    std::atomic<bool> stop{false};
    std::atomic<std::size_t> peak{0};
    std::thread sampler([&] {
      while (!stop.load()) {
        const std::size_t u = device_used();
        if (u > peak.load()) peak = u;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    const auto stop_sampler = [&] {
      stop = true;
      if (sampler.joinable()) sampler.join();
    };
    std::vector<double> times, gpu_times, cpu_times;  // the run, and its parts as measured inside it
    const int warm = std::max(1, a.warmup), reps = std::max(3, a.repeats);
    try {
      CooperativeStep step(Q, cache, o);
      for (int i = 0; i < warm + reps; ++i) {
        if (i == warm) stop_sampler();
        const auto t0 = std::chrono::steady_clock::now();
        step.run(Q, 0, O, Lse);
        if (i >= warm) {
          times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          gpu_times.push_back(step.last_times().gpu_s);
          cpu_times.push_back(step.last_times().cpu_s);
        }
      }
      if (name == "auto") {
        // The split after auto's runs refined its rates (CooperativeOptions::refine_rates): the
        // parts alone, the check and the reason below run with those rates, so that split.
        split = step.plan(0);
        base.rates = step.rates();
        const CooperativeRates& r = *base.rates;
        report["rates_refined"] = {{"pcie_h2d", r.pcie_h2d}, {"host_read_during_dma", r.host_read_during_dma},
                                   {"cpu_attention", r.cpu_attention}, {"source", r.source}};
      }
    } catch (const Error& e) {
      stop_sampler();
      fmt::print(stderr, "fastattn bench --cooperative: {}: {}\n", name, e.what());
      return kExitFailed;
    }
    stop_sampler();
    std::sort(times.begin(), times.end());
    std::sort(gpu_times.begin(), gpu_times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double gpu_in_step_ms = gpu_times[gpu_times.size() / 2] * 1e3, cpu_in_step_ms = cpu_times[cpu_times.size() / 2] * 1e3;
    const std::size_t hw = peak.load() > used0 ? peak.load() - used0 : 0;
    high_water = std::max(high_water, hw);
    Json row = {{"strategy", name}, {"median_ms", times[times.size() / 2] * 1e3}, {"min_ms", times.front() * 1e3},
                {"repeats", reps}, {"device_pages", split.device_pages}, {"streamed_pages", split.streamed_pages},
                {"cpu_pages", split.cpu_pages}, {"chunk_pages", split.chunk_pages},
                {"model_ms", {{"device", split.device_s * 1e3}, {"streamed", split.streamed_s * 1e3}, {"cpu", split.cpu_s * 1e3}, {"step", split.step_s * 1e3}}},
                {"in_step_ms", {{"gpu_parts", gpu_in_step_ms}, {"cpu_part", cpu_in_step_ms}}},
                {"device_high_water_bytes", hw}, {"reason", split.choice.reason}};
    fmt::print("{:>10}  {:9.3f} ms  split {}/{}/{}  high-water {:.2f} GiB  (in the step: GPU parts {:.3f} ms, CPU part {:.3f} ms)\n",
               name, times[times.size() / 2] * 1e3, split.device_pages, split.streamed_pages, split.cpu_pages,
               static_cast<double>(hw) / (1 << 30), gpu_in_step_ms, cpu_in_step_ms);
    report["rows"].push_back(row);
  }
  report["device_high_water_bytes"] = high_water;
  fmt::print("reason (auto): {}\n", plan_cooperative_attention(Q, cache, 0, base).choice.reason);

  if (a.coop_check && sq == 1 && L <= 262144) {
    // The step vs float64, beside one single-device call (attention_with_kv_cache over one
    // contiguous cache of all L tokens on `device`) on the same data.
    std::vector<std::uint16_t> got(qh.size());
    cooperative_attention(Q, cache, 0, O, Lse, std::nullopt, base);
    out.download(got.data(), got.size() * 2);
    // The cache's tokens: the random block repeated (as it was appended).
    const auto k_all = all_tokens(kb), v_all = all_tokens(vb);
    Buffer kd(device, k_all.size() * 2), vd(device, v_all.size() * 2);
    kd.upload(k_all.data(), k_all.size() * 2);
    vd.upload(v_all.data(), v_all.size() * 2);
    std::int32_t len = static_cast<std::int32_t>(L);
    Buffer lens(device, 4);
    lens.upload(&len, 4);
    KVCache one;
    one.k = make_tensor(kd.p, DType::bf16, {1, L, kvh, d}, device);
    one.v = make_tensor(vd.p, DType::bf16, {1, L, kvh, d}, device);
    one.seqlens = make_tensor(lens.p, DType::i32, {1}, device);
    attention_with_kv_cache(Q, one, O, Lse);
    std::vector<std::uint16_t> single(qh.size());
    out.download(single.data(), single.size() * 2);
    const auto ref = reference_decode(qh, k_all, v_all, L, heads, kvh, d);
    const double e_coop = max_error(got, ref), e_one = max_error(single, ref);
    const double m_coop = mean_error(got, ref), m_one = mean_error(single, ref);
    report["check"] = {{"err_vs_f64", e_coop}, {"single_call_err_vs_f64", e_one},
                       {"ratio", e_one > 0 ? e_coop / e_one : 0.0}, {"mean_err_vs_f64", m_coop},
                       {"single_call_mean_err_vs_f64", m_one}, {"mean_ratio", m_one > 0 ? m_coop / m_one : 0.0},
                       {"split_reason", plan_cooperative_attention(Q, cache, 0, base).choice.reason}};
    fmt::print("check: max |err| vs float64: cooperative {:.3e}, one single-device call {:.3e} (ratio {:.2f}); mean ratio {:.3f}\n",
               e_coop, e_one, e_one > 0 ? e_coop / e_one : 0.0, m_one > 0 ? m_coop / m_one : 0.0);
  }
  if (!a.json_path.empty()) std::ofstream(a.json_path) << report.dump(1) << "\n";
  return kExitOk;
}

}  // namespace fastattn::cli
