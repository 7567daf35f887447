// forward_avx512.cpp — the CPU forward kernel instantiated for AVX-512 F/BW/VL/DQ (f32 operands).
// Also serves Isa::avx512bf16 for f32 and f16 inputs; bf16 inputs there take the bf16-pair
// kernel (forward_bf16_avx512.cpp).
#include "cpu/forward_f32.hpp"

namespace fastattn::cpu {

void forward_avx512(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx512;
  forward_detail::run_forward<V, forward_detail::F32Operands<V>>(p, tiles);
}

}  // namespace fastattn::cpu
