// forward_arch.cuh — the sm80 parts of the forward kernel (flash_fwd/kernel.cuh), as one policy
// type that ForwardTraits carries (T::Arch):
//   MMA atom      mma.sync m16n8k16 (sm80/mma.cuh), operands by ldmatrix (flash_fwd/tile_ops.cuh)
//   smem layout   SwizzledTile (common/smem_layout.cuh)
//   copy          cp.async, one group per tile (CpAsyncPipe)
// and the accumulator's fragment coordinates, which the shared mask, softmax and epilogue read.
// The sm75 and sm70 policies (sm75/forward_arch.cuh, sm70/forward_arch.cuh) have the same members.
#pragma once

#include <cstdint>

#include "cuda/common/fragments.cuh"
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

// Fragment coordinates and the swizzled row layout (kQuadPairs = false: gemm_qk / gemm_pv of
// tile_ops.cuh, by ldmatrix): common/fragments.cuh.
struct Sm80Forward : M16n8Fragments {
  static constexpr ForwardPath kPath = ForwardPath::sm80;

  template <class T>
  using Pipe = CpAsyncPipe<T>;

  template <typename Element>
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    sm80::mma_16816<Element>(c, a, b);
  }
};

}  // namespace fastattn::cuda
