// forward_bf16_avx512.cpp — the bf16-pair forward kernel on AVX-512: vdpbf16ps on CPUs with
// AVX-512 BF16 (native), or the FMA emulation of it (FASTATTN_CPU_BF16_DOT=emulated); and the
// one-off measurement that decides whether vdpbf16ps pays on this CPU.
#include "cpu/forward_bf16.hpp"

#include <algorithm>
#include <chrono>

namespace fastattn::cpu {

void forward_bf16_avx512(const AttentionProblem& p, const ForwardTiles& tiles, bool native) {
  using V = simd::Avx512;
  if (native) {
    forward_detail::run_forward<V, forward_detail::Bf16PairOperands<V, true>>(p, tiles);
  } else {
    forward_detail::run_forward<V, forward_detail::Bf16PairOperands<V, false>>(p, tiles);
  }
}

}  // namespace fastattn::cpu

namespace fastattn::cpu {
namespace {

// kChains independent accumulator chains of `step`, `iterations` rounds; returns seconds.
template <class Step>
double time_chains(std::int64_t iterations, Step step, float& sink) {
  constexpr int kChains = 24;  // of 32 zmm: enough to cover the latency of either instruction
  __m512 acc[kChains];
#pragma GCC unroll 24
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1e-3f * static_cast<float>(c));
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = step(acc[c]);
  }
  const auto stop = std::chrono::steady_clock::now();
  __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 24
  for (int c = 0; c < kChains; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  sink += lanes[0];
  return std::chrono::duration<double>(stop - start).count();
}

}  // namespace

// FLOP rate of vdpbf16ps over that of vfmadd on zmm registers, one thread, best of 3 short
// runs (about 1 ms in all). vdpbf16ps does 64 FLOPs, an FMA 32.
double bf16_dot_speed_ratio_avx512() {
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh y = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  constexpr std::int64_t kIterations = 4000;
  float sink = 0.0f;
  double fma = 1e30, dot = 1e30;
  for (int round = 0; round < 3; ++round) {
    fma = std::min(fma, time_chains(kIterations, [&](__m512 a) { return _mm512_fmadd_ps(a, b, c); }, sink));
    dot = std::min(dot, time_chains(kIterations, [&](__m512 a) { return _mm512_dpbf16_ps(a, x, y); }, sink));
  }
  volatile float keep = sink;
  (void)keep;
  return dot > 0.0 ? (64.0 / dot) / (32.0 / fma) : 0.0;
}

}  // namespace fastattn::cpu
