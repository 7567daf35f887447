// peaks.cpp — runs the peak loops on all threads and turns time into GFLOP/s and GB/s.
#include "peaks.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "peak_loops.hpp"

namespace fastattn::perf {

namespace {

// The loops' results land here so no loop is dead code.
volatile float g_sink = 0.0f;
void keep(float value) { g_sink = value; }

int resolve_threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

// GFLOP/s of `loop(iterations)` run by `threads` threads at once, best of a few trials.
// One single-thread calibration run picks `iterations` so a trial takes about `seconds`.
template <class Loop>
double measure_compute(Loop loop, double flops_per_iteration, int threads, double seconds) {
  std::int64_t iterations = 1 << 16;
  for (;;) {  // calibrate: grow until one run is long enough to time
    const double t0 = omp_get_wtime();
    keep(loop(iterations));
    const double dt = omp_get_wtime() - t0;
    if (dt > 0.02) {
      iterations = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(static_cast<double>(iterations) * seconds / dt));
      break;
    }
    iterations *= 4;
  }
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    double start = 0.0, stop = 0.0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
      start = omp_get_wtime();
      const float r = loop(iterations);
#pragma omp critical(fastattn_peak_sink)
      keep(r);
#pragma omp barrier
#pragma omp master
      stop = omp_get_wtime();
    }
    const double flops = flops_per_iteration * static_cast<double>(iterations) * threads;
    best = std::max(best, flops / (stop - start) / 1e9);
  }
  return best;
}

float read_sum_generic(const float* data, std::size_t count) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    s0 += data[i];
    s1 += data[i + 1];
    s2 += data[i + 2];
    s3 += data[i + 3];
  }
  for (; i < count; ++i) s0 += data[i];
  return s0 + s1 + s2 + s3;
}

// GB/s of every thread reading its static share of one large buffer, best of a few passes.
double measure_read_bandwidth(const CpuFeatures& cpu, int threads, std::size_t bytes) {
  const std::size_t count = bytes / sizeof(float);
  std::unique_ptr<float[]> buffer(new float[count]);
  float* data = buffer.get();
  // First touch by the thread that later reads the page (NUMA placement).
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(count); ++i)
    data[i] = static_cast<float>(i & 1023) * 1e-3f;

  auto read = cpu.avx2 ? detail::read_sum_avx2 : read_sum_generic;
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    double start = 0.0, stop = 0.0;
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      const auto n = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t begin = count * t / n, end = count * (t + 1) / n;
#pragma omp barrier
#pragma omp master
      start = omp_get_wtime();
      const float r = read(data + begin, end - begin);
#pragma omp critical(fastattn_peak_sink)
      keep(r);
#pragma omp barrier
#pragma omp master
      stop = omp_get_wtime();
    }
    best = std::max(best, static_cast<double>(count * sizeof(float)) / (stop - start) / 1e9);
  }
  return best;
}

}  // namespace

double Peaks::fma_gflops() const {
  return std::max(fma_avx2_gflops.value_or(0.0), fma_avx512_gflops.value_or(0.0));
}

PeakRef peak_for(const Peaks& peaks, DType dtype, const std::string& isa) {
  // The ceiling of a kernel is the fastest arithmetic its ISA offers for its inputs: fp32 FMA
  // at the ISA's vector width, and for bf16 on AVX-512 BF16 also vdpbf16ps when that is
  // faster (kernels may convert bf16 to fp32 and use FMA). An unknown ISA (scalar, a BLAS)
  // is held to the best fp32 FMA peak of the machine.
  PeakRef fma{"fp32 FMA (best)", peaks.fma_gflops()};
  if (isa == "avx2" && peaks.fma_avx2_gflops)
    fma = {"fp32 FMA (avx2)", *peaks.fma_avx2_gflops};
  else if (peaks.fma_avx512_gflops)
    fma = {"fp32 FMA (avx512)", *peaks.fma_avx512_gflops};
  else if (peaks.fma_avx2_gflops)
    fma = {"fp32 FMA (avx2)", *peaks.fma_avx2_gflops};
  if (dtype == DType::bf16 && isa == "avx512bf16" && peaks.bf16_dot_gflops &&
      *peaks.bf16_dot_gflops > fma.gflops)
    return {"bf16 dot (avx512bf16)", *peaks.bf16_dot_gflops};
  return fma;
}

Peaks measure_peaks(const CpuFeatures& cpu, const PeakOptions& options) {
  Peaks peaks;
  peaks.threads = resolve_threads(options.threads);
  const double seconds = options.seconds_per_loop;
  if (cpu.avx2 && cpu.fma)
    peaks.fma_avx2_gflops = measure_compute(
        detail::fma_loop_avx2, detail::kFmaAvx2FlopsPerIteration, peaks.threads, seconds);
#if FASTATTN_PERF_HAVE_AVX512
  if (cpu.avx512f)
    peaks.fma_avx512_gflops = measure_compute(
        detail::fma_loop_avx512, detail::kFmaAvx512FlopsPerIteration, peaks.threads, seconds);
  if (cpu.avx512f && cpu.avx512_bf16)
    peaks.bf16_dot_gflops = measure_compute(
        detail::bf16_dot_loop_avx512, detail::kBf16DotFlopsPerIteration, peaks.threads, seconds);
#endif
  if (options.measure_bandwidth) {
    const std::size_t bytes = options.bandwidth_bytes ? options.bandwidth_bytes : (512u << 20);
    peaks.mem_read_gbs = measure_read_bandwidth(cpu, peaks.threads, bytes);
  }
  return peaks;
}

Peaks max_of(const Peaks& a, const Peaks& b) {
  auto best = [](const std::optional<double>& x, const std::optional<double>& y) {
    if (x && y) return std::optional<double>(std::max(*x, *y));
    return x ? x : y;
  };
  Peaks m = a;
  m.fma_avx2_gflops = best(a.fma_avx2_gflops, b.fma_avx2_gflops);
  m.fma_avx512_gflops = best(a.fma_avx512_gflops, b.fma_avx512_gflops);
  m.bf16_dot_gflops = best(a.bf16_dot_gflops, b.bf16_dot_gflops);
  m.mem_read_gbs = best(a.mem_read_gbs, b.mem_read_gbs);
  return m;
}

}  // namespace fastattn::perf
