// backward_arch.cuh — the sm75 (Turing) parts of the backward kernel (flash_bwd/kernel.cuh); the
// members mean what they mean in Sm80Backward (sm80/backward_arch.cuh).
//   MMA atom      mma.sync m16n8k8, two per m16n8k16 step (sm75/mma.cuh): the fragments, the
//                 ldmatrix loads and everything downstream are sm80's
//   copy          no cp.async on sm75: each thread loads its 16-byte chunks (ld.global.nc) and
//                 stores them (st.shared.v4) at once; commit / wait_all are empty, the kernel's
//                 barriers order the stores before the reads
// Tiles (plan.hpp: backward_blocks_sm75) fit 64 KB of shared memory. f16 only.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/reg_staged_copy.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm75/mma.cuh"

namespace fastattn::cuda {

namespace sm75 {

// A (kRows, kHeadDim) tile, rows [0, rows_valid) from gmem (token_stride elements apart), the
// rest zero-filled; thread tid copies chunks tid, tid + kThreads, ... (8 consecutive threads:
// 8 consecutive chunks of a row, conflict-free stores in the swizzled layout).
template <int kRows, int kHeadDim, int kThreads, class Layout>
struct SyncTileCopy {
  static constexpr int kChunks = kHeadDim / 8;
  template <typename Element>
  __device__ __forceinline__ static void copy(uint32_t smem_tile, const Element* gmem, int64_t token_stride,
                                              int rows_valid, int tid) {
#pragma unroll 4
    for (int idx = tid; idx < kRows * kChunks; idx += kThreads) {
      const int row = idx / kChunks, chunk = idx % kChunks;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (row < rows_valid) v = __ldg(reinterpret_cast<const uint4*>(gmem + row * token_stride + chunk * 8));
      st_shared_16(smem_tile + Layout::offset(row, chunk), v);
    }
  }
};

}  // namespace sm75

struct Sm75Backward : M16n8Fragments {  // sm80's fragments and layout (common/fragments.cuh)
  static constexpr ForwardPath kPath = ForwardPath::sm75;
  // The next query block is register-staged during the dV and dK GEMMs (flash_bwd/query_stage.cuh)
  // where that takes at most 16 registers: the 8-warp d = 64 and d = 128 tiles. The 4-warp d = 96
  // tiles would need 24 (ptxas already spills 44 bytes there) and copy synchronously.
  static constexpr int kStagedQueryRegisters = 16;

  template <int kRows, int kHeadDim, int kThreads, class Layout>
  using TileCopy = sm75::SyncTileCopy<kRows, kHeadDim, kThreads, Layout>;

  __device__ __forceinline__ static void copy_4(uint32_t smem_addr, const void* gmem, bool valid) {
    const float v = valid ? __ldg(static_cast<const float*>(gmem)) : 0.0f;
    st_shared_f32(smem_addr, v);
  }
  __device__ __forceinline__ static void commit() {}
  __device__ __forceinline__ static void wait_all() {}

  template <typename Element>
  __device__ __forceinline__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    static_assert(sizeof(Element) == 2, "16-bit inputs");
    sm75::mma_16816_as_k8(c, a, b);  // f16 only: the sm75 units are generated for __half alone
  }
};

}  // namespace fastattn::cuda
