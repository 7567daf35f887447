// reg_staged_copy.cuh — the global -> shared copy of the Volta and Turing forward paths, which
// have no cp.async: a register-staged prefetch. issue() loads the thread's 16-byte chunks of the
// next tile from global memory into registers (ld.global.nc) and returns at once; the kernel
// then runs the compute of the current tile while the loads are in flight; land() stores the
// registers to shared memory (st.shared.v4), just before the __syncthreads() after which the
// tile is read. Same interface as CpAsyncPipe (sm80/forward_arch.cuh), so the kernel's load
// order is the same on every path: V[n] in flight during S = Q K^T, K[n - 1] during O += P V.
//
// Cost: the tile's bytes / threads in registers (kBlockN x head_dim x 2 / 128: 64 bytes, 16
// registers, for the tiles of launch_blocks.hpp, 128 bytes at d = 256 on sm75).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fastattn::cuda {

__device__ __forceinline__ void st_shared_16(uint32_t smem_addr, const uint4& v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void st_shared_f32(uint32_t smem_addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(smem_addr), "f"(v) : "memory");
}

// Thread tid copies chunks tid, tid + kThreads, ... of the tile's (row, chunk) grid, row-major:
// 8 consecutive threads write 8 consecutive 16-byte chunks of a row (conflict-free stores in
// both layouts: swizzling permutes chunks within a row's 128-byte groups, padding shifts rows).
template <class T>
struct RegStagedPipe {
  using Element = typename T::Element;
  using Layout = typename T::Layout;
  static constexpr int kChunks = T::kHeadDim / 8;  // 16-byte chunks of data per row
  static constexpr int kTileChunks = T::kBlockN * kChunks;
  static constexpr int kPerThread = (kTileChunks + T::kThreads - 1) / T::kThreads;

  uint4 staged[kPerThread];
  uint32_t dst;

  template <int kRows>
  __device__ __forceinline__ void issue(uint32_t smem, const Element* gmem, int64_t token_stride, int rows_valid) {
    static_assert(kRows == T::kBlockN, "the staging registers hold one K or V tile");
    dst = smem;
    const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      const int row = idx / kChunks, chunk = idx % kChunks;
      staged[i] = make_uint4(0u, 0u, 0u, 0u);
      if ((kTileChunks % T::kThreads == 0 || idx < kTileChunks) && row < rows_valid) {
        staged[i] = __ldg(reinterpret_cast<const uint4*>(gmem + row * token_stride + chunk * 8));
      }
    }
  }

  // The Q tile (kBlockM rows), copied at once through registers: it is read only after the
  // first land() and __syncthreads().
  __device__ __forceinline__ void issue_q(uint32_t smem, const Element* gmem, int64_t token_stride, int rows_valid) {
    const int tid = static_cast<int>(threadIdx.x);
#pragma unroll 4
    for (int idx = tid; idx < T::kBlockM * kChunks; idx += T::kThreads) {
      const int row = idx / kChunks, chunk = idx % kChunks;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (row < rows_valid) v = __ldg(reinterpret_cast<const uint4*>(gmem + row * token_stride + chunk * 8));
      st_shared_16(smem + Layout::offset(row, chunk), v);
    }
  }

  __device__ __forceinline__ void commit() {}

  __device__ __forceinline__ void land() {
    const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      if (kTileChunks % T::kThreads == 0 || idx < kTileChunks) {
        st_shared_16(dst + Layout::offset(idx / kChunks, idx % kChunks), staged[i]);
      }
    }
  }
};

}  // namespace fastattn::cuda
