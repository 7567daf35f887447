// backward_arch.cuh — the sm80 parts of the backward kernel (flash_bwd/kernel.cuh), as one policy
// type that BackwardTraits carries (T::Arch):
//   MMA atom      mma.sync m16n8k16 (sm80/mma.cuh), operands by ldmatrix (the kernel's GEMMs)
//   copy          cp.async: tiles (sm80/tile_copy.cuh) and the 4-byte lse / D values, in commit
//                 groups that the kernel waits for before the barrier after which it reads them
// The shared-memory layout (SwizzledTile) is common to sm80 and sm75. The sm75 policy
// (sm75/backward_arch.cuh) has the same members.
#pragma once

#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace fastattn::cuda {

// Fragment coordinates and swizzled rows (common/fragments.cuh; kQuadPairs = false: the
// kernel's ldmatrix GEMMs and P/dS stores).
struct Sm80Backward : M16n8Fragments {
  static constexpr ForwardPath kPath = ForwardPath::sm80;
  // cp.async prefetches the next query block itself: no register staging (flash_bwd/query_stage.cuh).
  static constexpr int kStagedQueryRegisters = 0;

  template <int kRows, int kHeadDim, int kThreads, class Layout>
  using TileCopy = sm80::TileCopy<kRows, kHeadDim, kThreads, Layout>;

  // One float, zero-filled when !valid (src must be a valid address).
  __device__ __forceinline__ static void copy_4(uint32_t smem_addr, const void* gmem, bool valid) {
    sm80::cp_async_4(smem_addr, gmem, valid);
  }
  __device__ __forceinline__ static void commit() { sm80::cp_async_commit(); }
  __device__ __forceinline__ static void wait_all() { sm80::cp_async_wait<0>(); }

  template <typename Element>
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    sm80::mma_16816<Element>(c, a, b);
  }
};

}  // namespace fastattn::cuda
