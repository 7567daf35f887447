// rates.cpp — the rates the split is chosen from (fastattn/cooperative.hpp), measured once per
// process: the CPU decode kernel's K+V rate and a many-query call's FLOP rate here, the GPU's
// and PCIe's in rates_cuda.cu (which also measures the host read while a DMA runs).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "common/dtype.hpp"
#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"
#include "fastattn/kv_cache.hpp"

namespace fastattn::coop {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median time of one call over at least `repeats` calls and at least `min_seconds` of
// calls, after a warm-up: a rate the split relies on for the life of the process must not be
// that of a moment when something else held the cores. A median of 5 calls (~8 ms at 16 threads)
// once read the CPU decode rate as 11.2 GB/s in one process of a job whose other processes
// measured 71-89 GB/s (H200 host, 2026-12-02; docs/long-context.md).
template <class Fn>
double median_seconds(int repeats, double min_seconds, Fn&& fn) {
  fn();  // warm-up
  std::vector<double> t;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats || seconds_since(start) < min_seconds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<std::uint16_t> random_bf16(std::size_t n) {
  std::vector<std::uint16_t> v(n);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& x : v) x = float_to_bf16(dist(gen) + 1e-3f);
  return v;
}

}  // namespace

double measure_host_read(const void* data, std::size_t bytes, int threads) {
  const auto* words = static_cast<const std::uint64_t*>(data);
  const std::int64_t n = static_cast<std::int64_t>(bytes / 8);
  std::uint64_t sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for reduction(^ : sink) num_threads(threads > 0 ? threads : omp_get_max_threads()) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) sink ^= words[i];
  const double s = seconds_since(t0);
  if (sink == 0x5eed) std::abort();  // keeps the reads; practically never true
  return static_cast<double>(bytes) / s;
}

CpuDecodeProbe::CpuDecodeProbe(int cpu_threads) : threads_(cpu_threads) {
  // kSets K/V sets of 64 MiB each, visited in turn: one set read again and again would be timed
  // partly from the last-level cache (the 16-core host read a single set at 110-129 GB/s, above
  // its 101 GB/s memory read). The values repeat a 1 MiB random block (the time does not depend
  // on them; filling 512 MiB from a generator would take seconds).
  const std::size_t n = static_cast<std::size_t>(kPages * kPageSize * kKvHeads * kHeadDim);
  const auto block = random_bf16(std::size_t{1} << 19);
  k_.resize(static_cast<std::size_t>(kSets) * n);
  v_.resize(static_cast<std::size_t>(kSets) * n);
  for (std::size_t i = 0; i < k_.size(); i += block.size()) {
    const std::size_t m = std::min(block.size(), k_.size() - i);
    std::copy_n(block.begin(), m, k_.begin() + static_cast<std::ptrdiff_t>(i));
    std::copy_n(block.rbegin(), m, v_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  q_ = random_bf16(static_cast<std::size_t>(kHeads * kHeadDim));
  out_.resize(q_.size());
  lse_.resize(static_cast<std::size_t>(kHeads));
  table_.resize(static_cast<std::size_t>(kPages));
  for (std::int64_t i = 0; i < kPages; ++i) table_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % kPages);
  len_ = static_cast<std::int32_t>(kPages * kPageSize);
}

double CpuDecodeProbe::rate(int calls, double min_seconds) {
  const std::size_t n = k_.size() / static_cast<std::size_t>(kSets);
  AttentionOptions a;
  a.backend = Backend::cpu;
  a.num_threads = threads_;
  const TensorView Q = make_tensor(q_.data(), DType::bf16, {1, 1, kHeads, kHeadDim});
  const TensorView O = make_tensor(out_.data(), DType::bf16, {1, 1, kHeads, kHeadDim});
  const TensorView L = make_tensor(lse_.data(), DType::f32, {1, kHeads, 1});
  std::size_t set = 0;
  const double s = median_seconds(calls, min_seconds, [&] {
    KVCache cache;
    cache.k = make_tensor(k_.data() + set * n, DType::bf16, {kPages, kPageSize, kKvHeads, kHeadDim});
    cache.v = make_tensor(v_.data() + set * n, DType::bf16, {kPages, kPageSize, kKvHeads, kHeadDim});
    cache.seqlens = make_tensor(&len_, DType::i32, {1});
    cache.block_table = make_tensor(table_.data(), DType::i32, {1, kPages});
    attention_with_kv_cache(Q, cache, O, L, std::nullopt, a);
    set = (set + 1) % static_cast<std::size_t>(kSets);
  });
  return 2.0 * static_cast<double>(n) * 2.0 / s;
}

void measure_cpu_flops(int cpu_threads, CooperativeRates& rates) {
  // Many query rows: 512 queries x 4096 keys, 8 heads, d 128, bf16 forward.
  const std::int64_t sq = 512, sk = 4096, h = 8, d = 128;
  AttentionOptions a;
  a.backend = Backend::cpu;
  a.num_threads = cpu_threads;
  const auto q2 = random_bf16(static_cast<std::size_t>(sq * h * d));
  const auto k2 = random_bf16(static_cast<std::size_t>(sk * h * d));
  std::vector<std::uint16_t> o2(q2.size());
  const TensorView Q2 = make_tensor(const_cast<std::uint16_t*>(q2.data()), DType::bf16, {1, sq, h, d});
  const TensorView K2 = make_tensor(const_cast<std::uint16_t*>(k2.data()), DType::bf16, {1, sk, h, d});
  const TensorView O2 = make_tensor(o2.data(), DType::bf16, {1, sq, h, d});
  const double s2 = median_seconds(3, 0.2, [&] { forward(Q2, K2, K2, O2, std::nullopt, a); });
  rates.cpu_attention_flops = 4.0 * static_cast<double>(sq * sk * h * d) / s2;
}

}  // namespace fastattn::coop

namespace fastattn {

CooperativeRates measure_cooperative_rates(Device device, int cpu_threads) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, CooperativeRates> measured;  // (device key, threads)
  const std::lock_guard<std::mutex> lock(mutex);
  const int key = device.type == DeviceType::cpu ? -1 : device.index;
  const auto found = measured.find({key, cpu_threads});
  if (found != measured.end()) return found->second;
  CooperativeRates rates;
  if (const char* env = std::getenv("FASTATTN_COOP_RATES"); env != nullptr && *env != '\0') {
    rates = parse_cooperative_rates(env);
  } else if (device.type == DeviceType::cpu) {
    rates.cpu_attention = coop::CpuDecodeProbe(cpu_threads).rate(5, 0.2);
    coop::measure_cpu_flops(cpu_threads, rates);
    std::vector<std::uint64_t> buffer((std::size_t{256} << 20) / 8, 1);
    rates.host_read_during_dma = coop::measure_host_read(buffer.data(), buffer.size() * 8, cpu_threads);
    rates.source = "measured (CPU only: no GPU rates, host read and CPU decode without DMA)";
  } else {
#if FASTATTN_HAVE_CUDA
    rates = coop::measure_rates_cuda(device.index, cpu_threads);
#else
    throw Error(ErrorCode::unsupported, "device: expected cpu (this build has no CUDA backend), got " + to_string(device));
#endif
  }
  measured[{key, cpu_threads}] = rates;
  return rates;
}

}  // namespace fastattn
