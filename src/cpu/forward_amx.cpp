// forward_amx.cpp — the AMX forward kernel (forward_amx.hpp) on the AMX instructions; compiled
// with the AMX flags, entered only when the dispatcher chose it (amx_available()).
#include "cpu/forward_amx.hpp"

namespace fastattn::cpu {

void forward_amx(const AttentionProblem& p, const ForwardTiles& tiles) {
  using V = simd::Avx512;
  forward_detail::run_forward<V, forward_detail::AmxOperands<V, amx::Native>>(p, amx_forward_tiles(tiles));
}

}  // namespace fastattn::cpu
