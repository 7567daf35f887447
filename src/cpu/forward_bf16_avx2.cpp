// forward_bf16_avx2.cpp — the bf16-pair forward kernel on AVX2 with the dot product emulated by
// FMAs: a test path for forward_bf16.hpp on CPUs without AVX-512 BF16 (FASTATTN_CPU_BF16_DOT=
// emulated); never chosen otherwise, since the f32 kernel is faster and exact in f32.
#include "cpu/forward_bf16.hpp"

namespace fastattn::cpu {

void forward_bf16_emulated_avx2(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx2;
  forward_detail::run_forward<V, forward_detail::Bf16PairOperands<V, false>>(p, tiles);
}

}  // namespace fastattn::cpu
