// mma.cuh — the sm70 (Volta) MMA atom: mma.sync.m8n8k4 (f16 in, f32 accumulate).
//
// m8n8k4 is a quad-pair instruction: the warp's lanes form four quad pairs, QP q = lanes
// 4q..4q+3 and 4q+16..4q+19, and each computes its own 8 x 8 x 4 product. Within a quad pair,
// with t = lane % 4 + 4 * (lane / 16) the thread's index 0..7 (PTX ISA, "Matrix Fragments for
// mma.m8n8k4"; CUTLASS/CuTe SM70_8x8x4 traits):
//   A (8 x 4, .row):  a0 = A[t][0..1]  a1 = A[t][2..3]                 (one row of A)
//   B (4 x 8, .col):  b0 = B[0..1][t]  b1 = B[2..3][t]                 (one column of B)
//   B (4 x 8, .row):  b0 = B[t % 4][4 (t / 4) + 0..1]  b1 = ... + 2..3  (half a row of B)
//   C (8 x 8, f32):   c[i] = C[m][n], m = (t & 1) + 2 * ((i >> 1) & 1) + 4 * (t >> 2)
//                                      n = 2 * ((t >> 1) & 1) + (i & 1) + 4 * (i >> 2)
// so a thread holds two rows (m, m + 2) and, per row, columns {2 t1, 2 t1 + 1, 2 t1 + 4,
// 2 t1 + 5} (t1 = (t >> 1) & 1); the two lanes of a row differ in lane bit 1.
#pragma once

#include <cstdint>

namespace fastattn::cuda::sm70 {

// c = {lo[0..3], hi[0..3]} += A B; A row-major, B col-major (B^T rows in shared memory).
__device__ __forceinline__ void mma_884_rc(float (&lo)[4], float (&hi)[4], uint32_t a0, uint32_t a1, uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(lo[0]), "+f"(lo[1]), "+f"(lo[2]), "+f"(lo[3]), "+f"(hi[0]), "+f"(hi[1]), "+f"(hi[2]), "+f"(hi[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// The same with B row-major (V rows in shared memory, for O += P V).
__device__ __forceinline__ void mma_884_rr(float (&lo)[4], float (&hi)[4], uint32_t a0, uint32_t a1, uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.row.row.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(lo[0]), "+f"(lo[1]), "+f"(lo[2]), "+f"(lo[3]), "+f"(hi[0]), "+f"(hi[1]), "+f"(hi[2]), "+f"(hi[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

// The same with A column-major (.col: A's columns are rows of the shared tile; the backward's
// P^T dO and dS^T Q) and B row-major.
__device__ __forceinline__ void mma_884_cr(float (&lo)[4], float (&hi)[4], uint32_t a0, uint32_t a1, uint32_t b0,
                                           uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m8n8k4.col.row.f32.f16.f16.f32 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, "
      "{%0,%1,%2,%3,%4,%5,%6,%7};\n"
      : "+f"(lo[0]), "+f"(lo[1]), "+f"(lo[2]), "+f"(lo[3]), "+f"(hi[0]), "+f"(hi[1]), "+f"(hi[2]), "+f"(hi[3])
      : "r"(a0), "r"(a1), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ld_shared_16(uint32_t (&r)[4], uint32_t smem_addr) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr));
}

__device__ __forceinline__ void ld_shared_8(uint32_t (&r)[2], uint32_t smem_addr) {
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr));
}

}  // namespace fastattn::cuda::sm70
