// peaks_avx512.cpp — register-resident AVX-512 FMA and vdpbf16ps loops.
// Compiled with -mavx512f -mavx512bf16 (and friends); called only after detection.
#include <immintrin.h>

#include "peak_loops.hpp"

namespace fastattn::perf::detail {

namespace {

// Runs `iterations` rounds of kAvx512Chains independent `step`s on zmm accumulators. The
// accumulators are a fixed-size array the compiler fully unrolls into registers (checked in
// the disassembly: no loads or stores in the loop body at -O2 and above).
template <class Step>
__m512 run_chains(std::int64_t iterations, Step step) {
  __m512 acc[kAvx512Chains];
#pragma GCC unroll 24
  for (int c = 0; c < kAvx512Chains; ++c) acc[c] = _mm512_set1_ps(0.01f * static_cast<float>(c));
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kAvx512Chains; ++c) acc[c] = step(acc[c]);
  }
  __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 24
  for (int c = 0; c < kAvx512Chains; ++c) s = _mm512_add_ps(s, acc[c]);
  return s;
}

// Two lanes are enough to keep the work observable; _mm512_reduce_add_ps trips GCC 12's
// -Wuninitialized inside its own header.
float observe(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return lanes[0] + lanes[15];
}

}  // namespace

float fma_loop_avx512(std::int64_t iterations) {
  const __m512 b = _mm512_set1_ps(0.999999f);
  const __m512 c = _mm512_set1_ps(1e-6f);
  const __m512 s = run_chains(iterations, [&](__m512 a) { return _mm512_fmadd_ps(a, b, c); });
  return observe(s);
}

float bf16_dot_loop_avx512(std::int64_t iterations) {
  // 32 bf16 pairs of small values per instruction; the fp32 sums stay far from overflow.
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512 s = run_chains(iterations, [&](__m512 a) { return _mm512_dpbf16_ps(a, x, y); });
  return observe(s);
}

}  // namespace fastattn::perf::detail
