// forward_amx_emulated_avx2.cpp — the AMX forward kernel with the tiles emulated
// (amx::Emulated; FASTATTN_CPU_AMX=emulated), softmax on AVX2: any x86-64 CPU the backend runs.
#include "cpu/forward_amx.hpp"

namespace fastattn::cpu {

void forward_amx_emulated_avx2(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx2;
  forward_detail::run_forward<V, forward_detail::AmxOperands<V, amx::Emulated>>(p, amx_forward_tiles(tiles));
}

}  // namespace fastattn::cpu
