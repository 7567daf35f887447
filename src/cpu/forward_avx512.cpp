// forward_avx512.cpp — the CPU forward kernel instantiated for AVX-512 F/BW/VL/DQ (f32 math).
// Also serves Isa::avx512bf16: the kernel uses no AVX-512 BF16 instruction.
#include "cpu/forward_kernel.hpp"

namespace fastattn::cpu {

void forward_avx512(const AttentionProblem& p, const ForwardTiles& tiles) {
  forward_detail::run_forward<simd::Avx512>(p, tiles);
}

}  // namespace fastattn::cpu
