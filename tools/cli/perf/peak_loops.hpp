// peak_loops.hpp — the ISA-specific inner loops behind the peak measurements.
//
// Each *_avx2 / *_avx512 function lives in a file compiled with that ISA's flags and must only
// be called after detect_cpu_features() said the CPU runs it. Every loop returns a value that
// depends on all of its work so the compiler cannot drop it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastattn::perf::detail {

// Independent accumulator chains per loop: at least FMA latency x FMA ports (4 x 2 on Zen 3,
// Skylake-SP and Sapphire Rapids), so the loop is throughput-bound, not latency-bound.
inline constexpr int kAvx2Chains = 12;    // of 16 ymm registers
inline constexpr int kAvx512Chains = 24;  // of 32 zmm registers

// fp32 FLOPs one iteration performs: chains x lanes x 2 (an FMA is a multiply and an add).
inline constexpr double kFmaAvx2FlopsPerIteration = kAvx2Chains * 8 * 2;
inline constexpr double kFmaAvx512FlopsPerIteration = kAvx512Chains * 16 * 2;
// vdpbf16ps on a zmm: 32 bf16 products accumulated into 16 fp32 lanes = 64 FLOPs.
inline constexpr double kBf16DotFlopsPerIteration = kAvx512Chains * 32 * 2;

float fma_loop_avx2(std::int64_t iterations);
// Sum of `count` floats with 256-bit loads (a memory-bandwidth probe, not a numeric routine).
float read_sum_avx2(const float* data, std::size_t count);

#if FASTATTN_PERF_HAVE_AVX512
float fma_loop_avx512(std::int64_t iterations);
float bf16_dot_loop_avx512(std::int64_t iterations);
#endif

}  // namespace fastattn::perf::detail
