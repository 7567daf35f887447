// backward_avx2.cpp — the CPU backward kernels instantiated for AVX2 + FMA + F16C.
#include "cpu/backward_kernel.hpp"

namespace fastattn::cpu::backward_detail {

BackwardKernels backward_kernels_avx2() { return make_kernels<simd::Avx2>(); }

}  // namespace fastattn::cpu::backward_detail
