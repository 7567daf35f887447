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

// The least time of one call over at least `repeats` calls and at least `min_seconds` of calls,
// after a warm-up: a rate the split relies on for the life of the process must not be that of a
// moment when something else held the cores. A median of 5 calls (~8 ms at 16 threads) once read
// the CPU decode rate as 11.2 GB/s in one process of a job whose other processes, and the step's
// own CPU part in that process, ran at 60-89 GB/s; the split then gave the CPU a sixth of what it
// could take (H200 host, 2026-12-02: 1M-token step 58.5 ms instead of ~36).
template <class Fn>
double least_seconds(int repeats, double min_seconds, Fn&& fn) {
  fn();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats || seconds_since(start) < min_seconds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, seconds_since(t0));
  }
  return best;
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
  const std::int64_t kvh = 8, heads = 32, d = 128, ps = 256, pages = 128;  // 128 x 256 x 8 x 128 x 2 B x 2 = 64 MiB
  k_ = random_bf16(static_cast<std::size_t>(pages * ps * kvh * d));
  v_ = random_bf16(k_.size());
  q_ = random_bf16(static_cast<std::size_t>(heads * d));
  out_.resize(q_.size());
  lse_.resize(static_cast<std::size_t>(heads));
  table_.resize(static_cast<std::size_t>(pages));
  for (std::int64_t i = 0; i < pages; ++i) table_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 37) % pages);
  len_ = static_cast<std::int32_t>(pages * ps);
}

double CpuDecodeProbe::rate(int calls, double min_seconds) {
  const std::int64_t kvh = 8, heads = 32, d = 128, ps = 256, pages = static_cast<std::int64_t>(table_.size());
  KVCache cache;
  cache.k = make_tensor(k_.data(), DType::bf16, {pages, ps, kvh, d});
  cache.v = make_tensor(v_.data(), DType::bf16, {pages, ps, kvh, d});
  cache.seqlens = make_tensor(&len_, DType::i32, {1});
  cache.block_table = make_tensor(table_.data(), DType::i32, {1, pages});
  AttentionOptions a;
  a.backend = Backend::cpu;
  a.num_threads = threads_;
  const TensorView Q = make_tensor(q_.data(), DType::bf16, {1, 1, heads, d});
  const TensorView O = make_tensor(out_.data(), DType::bf16, {1, 1, heads, d});
  const TensorView L = make_tensor(lse_.data(), DType::f32, {1, heads, 1});
  const double s = least_seconds(calls, min_seconds, [&] { attention_with_kv_cache(Q, cache, O, L, std::nullopt, a); });
  return 2.0 * static_cast<double>(k_.size()) * 2.0 / s;
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
  const double s2 = least_seconds(3, 0.2, [&] { forward(Q2, K2, K2, O2, std::nullopt, a); });
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
    rates.source = "measured (CPU only: no GPU rates, host read without DMA)";
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
