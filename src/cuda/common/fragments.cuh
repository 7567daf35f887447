// fragments.cuh — where a lane's accumulator elements sit in a warp tile, and the shared-memory
// row layout that goes with each MMA family. The per-architecture policies of the forward
// (sm*/forward_arch.cuh) and the backward (sm*/backward_arch.cuh) inherit one of these, and
// the shared code (mask, softmax, P/dS math, reductions, epilogues) reads elements through them:
// a thread holds per MMA row tile (kTileRows rows) the rows lane_row(lane) and + kHalfRows, and
// per fragment of kFragCols columns the two adjacent columns lane_col(lane), + 1; the lanes
// that share a row differ in the lane bits kRowLaneMask, and row_leader(lane) is one of them.
#pragma once

#include "cuda/common/smem_layout.cuh"

namespace fastattn::cuda {

// acc = 0: a warp's (kTilesM row tiles x kTilesN fragments) f32 accumulator, 4 per fragment in
// every layout below.
template <int kTilesM, int kTilesN>
__device__ __forceinline__ void clear_accumulator(float (&acc)[kTilesM][kTilesN][4]) {
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
}

// The m16n8 C layout of mma.m16n8k16 / m16n8k8 (sm80/mma.cuh, sm75/mma.cuh): g = lane / 4,
// t = lane % 4 holds rows g, g + 8 and columns 2t, 2t + 1 of each 16 x 8 tile. Operands come
// by ldmatrix from swizzled rows, padded to a multiple of 64 elements (d = 96 -> 128) so the
// 8-chunk XOR swizzle stays inside the row.
struct M16n8Fragments {
  static constexpr bool kQuadPairs = false;
  static constexpr int kTileRows = 16;
  static constexpr int kHalfRows = 8;
  static constexpr int kFragCols = 8;
  static constexpr int kRowLaneMask = 3;
  __device__ __forceinline__ static int lane_row(int lane) { return lane / 4; }
  __device__ __forceinline__ static int lane_col(int lane) { return 2 * (lane % 4); }
  __device__ __forceinline__ static bool row_leader(int lane) { return lane % 4 == 0; }

  template <int kRowElems>
  using SmemLayout = SwizzledTile<(kRowElems + 63) / 64 * 64>;
};

// The m8n8k4 quad-pair layout (sm70/mma.cuh; the warp tile is drawn in sm70/forward_arch.cuh):
// 32-row tiles, quad pair q owning rows 4q..4q+3 and 16+4q..16+4q+3; per 8-column tile a lane
// holds rows r, r + 2 and columns {2 t1, 2 t1 + 1} and {2 t1 + 4, 2 t1 + 5}, kept as two
// 4-column fragments. Operands come by ld.shared from padded rows (odd chunk count).
struct QuadPairFragments {
  static constexpr bool kQuadPairs = true;
  static constexpr int kTileRows = 32;
  static constexpr int kHalfRows = 2;
  static constexpr int kFragCols = 4;
  static constexpr int kRowLaneMask = 2;
  __device__ __forceinline__ static int lane_row(int lane) {
    return 4 * ((lane >> 2) & 3) + (lane & 1) + 16 * (lane >> 4);
  }
  __device__ __forceinline__ static int lane_col(int lane) { return 2 * ((lane >> 1) & 1); }
  __device__ __forceinline__ static bool row_leader(int lane) { return (lane & 2) == 0; }

  template <int kRowElems>
  using SmemLayout = PaddedTile<kRowElems>;
};

}  // namespace fastattn::cuda
