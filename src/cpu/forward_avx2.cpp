// forward_avx2.cpp — the CPU forward kernel instantiated for AVX2 + FMA + F16C (f32 operands).
#include "cpu/forward_f32.hpp"

namespace fastattn::cpu {

void forward_avx2(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx2;
  forward_detail::run_forward<V, forward_detail::F32Operands<V>>(p, tiles);
}

}  // namespace fastattn::cpu
