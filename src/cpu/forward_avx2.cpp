// forward_avx2.cpp — the CPU forward kernel instantiated for AVX2 + FMA + F16C.
#include "cpu/forward_kernel.hpp"

namespace fastattn::cpu {

void forward_avx2(const AttentionProblem& p, const ForwardTiles& tiles) {
  forward_detail::run_forward<simd::Avx2>(p, tiles);
}

}  // namespace fastattn::cpu
