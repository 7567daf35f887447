// mma.cuh — the sm80 MMA atom: mma.sync.m16n8k16 (f16/bf16 in, f32 accumulate) and ldmatrix.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4:
//   A (16 x 16, row):  a0 = A[g][2t..2t+1]   a1 = A[g+8][2t..2t+1]
//                      a2 = A[g][2t+8..+9]   a3 = A[g+8][2t+8..+9]
//   B (16 x 8, col):   b0 = B[2t..2t+1][g]   b1 = B[2t+8..+9][g]
//   C (16 x 8, f32):   c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// Two C tiles side by side (16 x 16) have exactly the A layout once packed to 16 bits, which is
// how P = softmax(S) feeds P * V from registers with no shared-memory round trip.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fastattn::cuda::sm80 {

template <typename Element>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4],
                                          const uint32_t (&b)[2]);

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4],
                                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_16816<__half>(float (&c)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Four 8x8 16-bit matrices; lane i gives the address of row (i % 8) of matrix (i / 8).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

// The same, transposed: lane j receives column elements instead of row elements.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
// sm90+: stores four 8x8 16-bit matrices; r[i] is lane l's pair (row l / 4, columns
// 2 (l % 4), +1) of matrix i, i.e. the m16n8k16 accumulator layout after packing, and lanes
// 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
#endif

// Two floats -> one register of two 16-bit values (low half = first).
template <typename Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace fastattn::cuda::sm80
