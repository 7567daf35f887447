// forward_arch.cuh — the sm80 parts of the forward kernel (flash_fwd/kernel.cuh), as one policy
// type that ForwardTraits carries (T::Arch):
//   MMA atom      mma.sync m16n8k16 (sm80/mma.cuh), operands by ldmatrix (flash_fwd/tile_ops.cuh)
//   smem layout   SwizzledTile (common/smem_layout.cuh)
//   copy          cp.async, one group per tile (CpAsyncPipe)
// and the accumulator's fragment coordinates, which the shared mask, softmax and epilogue read.
// The sm75 and sm70 policies (sm75/forward_arch.cuh, sm70/forward_arch.cuh) have the same members.
#pragma once

#include <cstdint>

#include "cuda/common/smem_layout.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace fastattn::cuda {

// The global -> shared copy of one tile, in the kernel's order: issue(), commit(), and later
// land() before the __syncthreads() after which the tile is read. cp.async: issue starts the
// copy, commit closes the group, land waits for it. Stateless (no registers).
template <class T>
struct CpAsyncPipe {
  template <int kRows>
  __device__ __forceinline__ void issue(uint32_t smem, const typename T::Element* gmem, int64_t token_stride,
                                        int rows_valid) {
    sm80::TileCopy<kRows, T::kHeadDim, T::kThreads, typename T::Layout>::copy(smem, gmem, token_stride, rows_valid,
                                                                             static_cast<int>(threadIdx.x));
  }
  // The Q tile, issued with the first K tile (same group).
  __device__ __forceinline__ void issue_q(uint32_t smem, const typename T::Element* gmem, int64_t token_stride,
                                          int rows_valid) {
    issue<T::kBlockM>(smem, gmem, token_stride, rows_valid);
  }
  __device__ __forceinline__ void commit() { sm80::cp_async_commit(); }
  __device__ __forceinline__ void land() { sm80::cp_async_wait<0>(); }
};

struct Sm80Forward {
  static constexpr ForwardPath kPath = ForwardPath::sm80;
  static constexpr bool kLdmatrixGemm = true;  // gemm_qk / gemm_pv of tile_ops.cuh

  // Accumulator fragments (mma.cuh, C layout): a warp's rows come in MMA tiles of kTileRows; a
  // thread holds per tile two rows, lane_row(lane) and + kHalfRows, and per n-tile of kFragCols
  // columns the two adjacent columns lane_col(lane), + 1. The lanes that share a row differ in
  // the lane bits of kRowLaneMask (a quad: bits 0 and 1).
  static constexpr int kTileRows = 16;
  static constexpr int kHalfRows = 8;
  static constexpr int kFragCols = 8;
  static constexpr int kRowLaneMask = 3;
  __device__ __forceinline__ static int lane_row(int lane) { return lane / 4; }
  __device__ __forceinline__ static int lane_col(int lane) { return 2 * (lane % 4); }
  // The one lane per row that writes the row's lse.
  __device__ __forceinline__ static bool row_leader(int lane) { return lane % 4 == 0; }

  // Rows padded to a multiple of 64 elements (d = 96 -> 128) so the 8-chunk XOR swizzle stays
  // inside the row.
  template <int kHeadDim>
  using SmemLayout = SwizzledTile<(kHeadDim + 63) / 64 * 64>;

  template <class T>
  using Pipe = CpAsyncPipe<T>;

  template <typename Element>
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    sm80::mma_16816<Element>(c, a, b);
  }
};

}  // namespace fastattn::cuda
