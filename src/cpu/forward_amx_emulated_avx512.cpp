// forward_amx_emulated_avx512.cpp — the AMX forward kernel with the tiles emulated
// (amx::Emulated; FASTATTN_CPU_AMX=emulated), softmax on AVX-512.
#include "cpu/forward_amx.hpp"

namespace fastattn::cpu {

void forward_amx_emulated_avx512(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx512;
  forward_detail::run_forward<V, forward_detail::AmxOperands<V, amx::Emulated>>(p, amx_forward_tiles(tiles));
}

}  // namespace fastattn::cpu
