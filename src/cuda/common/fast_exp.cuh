// fast_exp.cuh — 2^x with one MUFU.EX2 instruction.
//
// exp2f() without --use_fast_math keeps denormal results exact: ptxas wraps every MUFU.EX2 in
// a compare and two predicated multiplies (seen in the forward kernel's SASS, 4 instructions
// per score). Softmax weights below 2^-126 are flushed to zero here, which changes no result
// at bf16/f16 output precision (flash-attn builds with --use_fast_math for the same effect).
#pragma once

namespace fastattn::cuda {

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fastattn::cuda
