// forward_arch.cuh — the sm75 (Turing) parts of the forward kernel (flash_fwd/kernel.cuh); the
// members mean what they mean in Sm80Forward (sm80/forward_arch.cuh).
//   MMA atom      mma.sync m16n8k8, two per m16n8k16 step (sm75/mma.cuh), so the fragments,
//                 the ldmatrix operand loads (tile_ops.cuh) and P V from registers are sm80's
//   smem layout   SwizzledTile, as sm80 (ldmatrix exists on sm75)
//   copy          register-staged prefetch (common/reg_staged_copy.cuh): no cp.async on sm75
// Tiles (launch_blocks.hpp: forward_blocks_for) fit 64 KB of shared memory per SM. f16 only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/reg_staged_copy.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm75/mma.cuh"

namespace fastattn::cuda {

struct Sm75Forward : M16n8Fragments {  // sm80's fragments and layout (common/fragments.cuh)
  static constexpr ForwardPath kPath = ForwardPath::sm75;

  template <class T>
  using Pipe = RegStagedPipe<T>;

  template <typename Element>
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    static_assert(sizeof(Element) == 2, "16-bit inputs");
    sm75::mma_16816_as_k8(c, a, b);  // f16 only: the sm75 units are generated for __half alone
  }
};

}  // namespace fastattn::cuda
