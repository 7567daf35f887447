// backward_arch.cuh — the sm70 (Volta) parts of the backward kernel (flash_bwd/kernel.cuh); the
// members mean what they mean in Sm80Backward (sm80/backward_arch.cuh).
//   MMA atom      mma.sync m8n8k4 quad pairs (sm70/mma.cuh). Volta has no ldmatrix, and m8n8k4
//                 takes .row or .col for either operand, so every product reads its operands
//                 straight from row-major shared tiles with 8-byte ld.shared, the transposed
//                 ones (P^T dO, dS^T Q) through the .col A layout:
//                   S = Q K^T, dP = dO V^T   .row.col   A rows (queries), B rows (keys)
//                   dV += P^T dO, dK += dS^T Q .col.row A = P^T: P's rows are A's columns
//                   dQ += dS K                 .row.row
//   accumulator   32-row warp tiles, 4-column fragments (sm70/forward_arch.cuh's layout:
//                 lane_row, kHalfRows = 2, lane_col, kFragCols = 4): the kernel's element-wise
//                 code (P, dS, the dQ reductions, the dK/dV epilogue) reads them through these
//   smem layout   PaddedTile (odd number of 16-byte chunks per row), P and dS too
//   copy          synchronous ld.global + st.shared (as sm75)
// Tiles: plan.hpp backward_blocks_sm70 (96 KB on a V100). f16 only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm70/mma.cuh"
#include "cuda/sm75/backward_arch.cuh"

namespace fastattn::cuda {

namespace sm70 {

// Lane l of quad pair q = (l >> 2) & 3 is its thread t = (l & 3) + 4 (l >> 4). The quad pair's
// 8 rows of a 32-row warp tile are 4q + (m & 3) + 16 (m >> 2), m = 0..7; for .row A, thread t
// holds row m = t, i.e. tile row l. For .col A it holds rows m = 4 (t >> 2) + 0..3 at column
// k = t & 3: tile rows 4q + 16 (l >> 4) + 0..3, contiguous in a row of the transposed tile.
__device__ __forceinline__ int quad_pair_col_a_row(int lane) { return 4 * ((lane >> 2) & 3) + 16 * (lane >> 4); }
__device__ __forceinline__ int quad_pair_thread(int lane) { return (lane & 3) + 4 * (lane >> 4); }

// acc (kTilesM 32-row tiles x kTilesN 4-column fragments) = A B^T over kK elements of k: A the
// rows a_row0.. of tile sA, B the rows b_row0.. of tile sB, both row-major in k.
template <int kTilesM, int kTilesN, int kK, class LayoutA, class LayoutB>
__device__ __forceinline__ void gemm_rows_rows(float (&acc)[kTilesM][kTilesN][4], uint32_t sA, int a_row0, uint32_t sB,
                                               int b_row0, int lane) {
  constexpr uint32_t kRowA = LayoutA::kChunks * 16, kRowB = LayoutB::kChunks * 16;
  const uint32_t a_base = sA + static_cast<uint32_t>(a_row0 + lane) * kRowA;
  const uint32_t b_base = sB + static_cast<uint32_t>(b_row0 + quad_pair_thread(lane)) * kRowB;
  clear_accumulator(acc);
#pragma unroll
  for (int kc = 0; kc < kK / 8; ++kc) {  // 16-byte chunks: two k4 steps each
    uint32_t a[kTilesM][4];
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) ld_shared_16(a[mt], a_base + mt * 32 * kRowA + kc * 16);
#pragma unroll
    for (int j = 0; j < kTilesN / 2; ++j) {
      uint32_t b[4];
      ld_shared_16(b, b_base + j * 8 * kRowB + kc * 16);
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt) {
        mma_884_rc(acc[mt][2 * j], acc[mt][2 * j + 1], a[mt][0], a[mt][1], b[0], b[1]);
        mma_884_rc(acc[mt][2 * j], acc[mt][2 * j + 1], a[mt][2], a[mt][3], b[2], b[3]);
      }
    }
  }
}

// acc += A B over kK elements of k, B the (k rows, n columns) tile sB from column b_col0;
// kATransposed: A = (tile sA)^T, sA a (k rows, m columns) tile read from column a_m0 (.col A);
// else A the rows a_m0.. of the (m rows, k columns) tile sA (.row A).
template <int kTilesM, int kTilesN, int kK, bool kATransposed, class LayoutA, class LayoutB>
__device__ __forceinline__ void gemm_acc(float (&acc)[kTilesM][kTilesN][4], uint32_t sA, int a_m0, uint32_t sB,
                                         int b_col0, int lane) {
  constexpr uint32_t kRowA = LayoutA::kChunks * 16, kRowB = LayoutB::kChunks * 16;
  const int tq = lane & 3;  // the k index (B row, .col A row) this thread loads
  const uint32_t b_base = sB + static_cast<uint32_t>(tq) * kRowB +
                          static_cast<uint32_t>(b_col0 + 4 * (lane >> 4)) * 2;
  const uint32_t a_base = kATransposed ? sA + static_cast<uint32_t>(tq) * kRowA +
                                             static_cast<uint32_t>(a_m0 + quad_pair_col_a_row(lane)) * 2
                                       : sA + static_cast<uint32_t>(a_m0 + lane) * kRowA;
#pragma unroll
  for (int kk = 0; kk < kK / 4; ++kk) {
    uint32_t a[kTilesM][2];
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) {
      if constexpr (kATransposed) {
        ld_shared_8(a[mt], a_base + kk * 4 * kRowA + mt * 32 * 2);
      } else {
        ld_shared_8(a[mt], a_base + mt * 32 * kRowA + kk * 8);
      }
    }
#pragma unroll
    for (int j = 0; j < kTilesN / 2; ++j) {
      uint32_t b[2];
      ld_shared_8(b, b_base + kk * 4 * kRowB + j * 16);
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt) {
        if constexpr (kATransposed) {
          mma_884_cr(acc[mt][2 * j], acc[mt][2 * j + 1], a[mt][0], a[mt][1], b[0], b[1]);
        } else {
          mma_884_rr(acc[mt][2 * j], acc[mt][2 * j + 1], a[mt][0], a[mt][1], b[0], b[1]);
        }
      }
    }
  }
}

}  // namespace sm70

// The forward's quad-pair fragments and padded rows (common/fragments.cuh); kQuadPairs: the
// kernel calls sm70::gemm_rows_rows / gemm_acc above and its quad-pair P/dS store.
struct Sm70Backward : QuadPairFragments {
  static constexpr ForwardPath kPath = ForwardPath::sm70;
  // No register-staged query prefetch (flash_bwd/query_stage.cuh): the 64-row Q/dO tiles need 32
  // staging registers per thread at every head dim, and with them ptxas 12.9 spilled for sm_70
  // (d = 64: 56-304 bytes in all four kernels; d = 128: 16 and 92 bytes in the tile-grid
  // kernels). Its gain cannot be measured here: the H200 emulates m8n8k4, which dwarfs the loads.
  static constexpr int kStagedQueryRegisters = 0;

  template <int kRows, int kHeadDim, int kThreads, class Layout>
  using TileCopy = sm75::SyncTileCopy<kRows, kHeadDim, kThreads, Layout>;

  __device__ __forceinline__ static void copy_4(uint32_t smem_addr, const void* gmem, bool valid) {
    Sm75Backward::copy_4(smem_addr, gmem, valid);
  }
  __device__ __forceinline__ static void commit() {}
  __device__ __forceinline__ static void wait_all() {}
};

}  // namespace fastattn::cuda
