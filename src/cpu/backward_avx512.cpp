// backward_avx512.cpp — the CPU backward kernels instantiated for AVX-512 F/BW/VL/DQ (f32 math).
// Also serves Isa::avx512bf16: the kernels use no AVX-512 BF16 instruction.
#include "cpu/backward_kernel.hpp"

namespace fastattn::cpu::backward_detail {

BackwardKernels backward_kernels_avx512() { return make_kernels<simd::Avx512>(); }

}  // namespace fastattn::cpu::backward_detail
