// mma.cuh — the sm75 (Turing) MMA atom: mma.sync.m16n8k8 (f16 in, f32 accumulate).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k8"), g = lane / 4, t = lane % 4:
//   A (16 x 8, row):  a0 = A[g][2t..2t+1]   a1 = A[g+8][2t..2t+1]
//   B (8 x 8, col):   b0 = B[2t..2t+1][g]
//   C (16 x 8, f32):  c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// The m16n8k16 fragments (sm80/mma.cuh) are two of these side by side along k: {a0, a1} and
// {a2, a3} of an m16n8k16 A are the k = 0..7 and 8..15 halves, b0 and b1 likewise, and C is the
// same. So mma_16816_as_k8 is a drop-in m16n8k16 for Turing: the sm80 tile code (ldmatrix
// operand loads, P kept in registers as the A operand of P V, softmax, epilogue) runs unchanged.
// No bf16: m16n8k8 with bf16 inputs needs sm80.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace fastattn::cuda::sm75 {

__device__ __forceinline__ void mma_1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

// One m16n8k16 (f16) as two m16n8k8 along k.
__device__ __forceinline__ void mma_16816_as_k8(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  mma_1688(c, a[0], a[1], b[0]);
  mma_1688(c, a[2], a[3], b[1]);
}

}  // namespace fastattn::cuda::sm75
