// query_stage.cuh — the backward kernel's register-staged prefetch of the next query block, for
// the paths without cp.async (sm75, sm70), which keep one Q/dO stage in shared memory. Used where
// kRegisters fits the policy's Arch::kStagedQueryRegisters (sm80: 0, cp.async does it; sm75: 16,
// what its 8-warp d = 64 / 128 tiles need; sm70: 0, its 64-row tiles would need 32 and spilled).
//
// issue() loads the next block's Q and dO (16-byte chunks, ld.global.nc), lse and D into
// registers right after the barrier that completes sP and sdS: the S and dP accumulators are
// dead by then (stored as P and dS), so the staging registers cost least there, and the dV and
// dK GEMMs run while the loads are in flight. land() stores them to the only stage after the
// barrier that ends the reads of sQ and sdO (dK += dS^T Q). Without it the copy after that
// barrier waited for global memory with every warp of the CTA (one CTA per SM).
//
// Cost: (Q + dO) tile bytes / threads of registers: kBlockM x head_dim x 4 / kThreads bytes
// (plan.hpp's sm75 tiles at d = 64 and 128: 64 bytes, 16 registers; at d = 96, 4 warps: 24, not
// staged), plus lse and D.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/reg_staged_copy.cuh"

namespace fastattn::cuda {

template <class T>
struct QueryStage {
  using Element = typename T::Element;
  using Layout = typename T::Layout;
  static constexpr int kChunks = T::kHeadDim / 8;  // 16-byte chunks of data per row
  static constexpr int kTileChunks = T::kBlockM * kChunks;
  static constexpr int kPerThread = (kTileChunks + T::kThreads - 1) / T::kThreads;
  static constexpr int kRegisters = kPerThread * 8;  // two uint4 per slot (lse and D aside)
  static constexpr bool kEnabled = kRegisters <= T::Arch::kStagedQueryRegisters;

  uint4 q[kPerThread], dout[kPerThread];  // thread tid: chunks tid, tid + kThreads, ... row-major
  float lse, d;                           // row tid (tid < kBlockM)

  // Rows [0, rows_valid) of the block at q_rows / do_rows (token_stride elements apart), the
  // rest zero; lse_rows[i * lse_stride], d_rows[i].
  __device__ __forceinline__ void issue(const Element* q_rows, int64_t q_stride, const Element* do_rows,
                                        int64_t do_stride, const float* lse_rows, int64_t lse_stride,
                                        const float* d_rows, int rows_valid, int tid) {
    // Here, not at class scope: the kernel declares one on every path (dead where unused).
    static_assert(T::kStages == 1, "the staged block lands in the only Q/dO stage");
    static_assert(T::kBlockM <= T::kThreads, "one thread per query row for lse and D");
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      const int row = idx / kChunks, chunk = idx % kChunks;
      q[i] = dout[i] = make_uint4(0u, 0u, 0u, 0u);
      if ((kTileChunks % T::kThreads == 0 || idx < kTileChunks) && row < rows_valid) {
        q[i] = __ldg(reinterpret_cast<const uint4*>(q_rows + row * q_stride + chunk * 8));
        dout[i] = __ldg(reinterpret_cast<const uint4*>(do_rows + row * do_stride + chunk * 8));
      }
    }
    lse = d = 0.0f;
    if (tid < T::kBlockM && tid < rows_valid) {
      lse = __ldg(lse_rows + tid * lse_stride);
      d = __ldg(d_rows + tid);
    }
  }

  // sQ, sdO: (kBlockM, kRowElems) in T::Layout; s_lse, s_d: kBlockM floats.
  __device__ __forceinline__ void land(uint32_t sQ, uint32_t sdO, uint32_t s_lse, uint32_t s_d, int tid) const {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int idx = tid + i * T::kThreads;
      if (kTileChunks % T::kThreads == 0 || idx < kTileChunks) {
        const uint32_t offset = Layout::offset(idx / kChunks, idx % kChunks);
        st_shared_16(sQ + offset, q[i]);
        st_shared_16(sdO + offset, dout[i]);
      }
    }
    if (tid < T::kBlockM) {
      st_shared_f32(s_lse + tid * 4, lse);
      st_shared_f32(s_d + tid * 4, d);
    }
  }
};

}  // namespace fastattn::cuda
