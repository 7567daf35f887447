// backward_amx.cpp — the bf16 backward kernels on AMX tiles (backward_amx.hpp), compiled with the
// AMX flags (*_amx.cpp) and entered only when the dispatcher chose them (backward_amx_mode).
#include "cpu/backward_amx.hpp"

namespace fastattn::cpu::backward_detail {

BackwardKernels backward_kernels_amx(bool native) {
#if FASTATTN_AMX_NATIVE
  if (native) return amx_bwd::make_kernels<amx::Native>();
#else
  (void)native;
#endif
  return amx_bwd::make_kernels<amx::Emulated>();
}

}  // namespace fastattn::cpu::backward_detail
