// peaks.hpp — measured machine peaks, the denominators of "% of peak" in `fastattn bench`,
// `fastattn info` and bench_cpu.
//
// Every number is measured in this process on all requested threads, never read from a
// datasheet: fp32 FMA throughput (AVX2 and AVX-512 where the CPU has it), BF16 dot throughput
// (vdpbf16ps, only with AVX-512 BF16) and memory read bandwidth.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "cpu_features.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn::perf {

struct PeakOptions {
  int threads = 0;                  // 0: OpenMP's default
  double seconds_per_loop = 0.25;   // target duration of each timed compute loop
  std::size_t bandwidth_bytes = 0;  // buffer for the bandwidth probe; 0: 512 MiB
  bool measure_bandwidth = true;
};

struct Peaks {
  int threads = 0;
  std::optional<double> fma_avx2_gflops;    // fp32, AVX2 + FMA
  std::optional<double> fma_avx512_gflops;  // fp32, AVX-512F
  std::optional<double> bf16_dot_gflops;    // vdpbf16ps, AVX-512 BF16
  std::optional<double> mem_read_gbs;       // 1e9 bytes per second

  // The best fp32 FMA peak measured (0 when none: a CPU without AVX2).
  double fma_gflops() const;
};

// The peak a kernel of `dtype` running on `isa` (KernelChoice::isa, e.g. "avx2", "avx512bf16")
// should be compared with, and its name for tables (see peaks.cpp for the rule).
struct PeakRef {
  std::string name;  // "fp32 FMA (avx2)", "bf16 dot (avx512bf16)"
  double gflops = 0;
};
PeakRef peak_for(const Peaks& peaks, DType dtype, const std::string& isa);

Peaks measure_peaks(const CpuFeatures& cpu, const PeakOptions& options);

// Field by field maximum: benchmarks measure peaks before and after their runs and keep the
// best, so a burst of load from other processes during one measurement does not deflate it.
Peaks max_of(const Peaks& a, const Peaks& b);

}  // namespace fastattn::perf
