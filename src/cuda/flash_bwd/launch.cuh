// launch.cuh — tile configuration per (element, head_dim) and the backward launcher.
// Included only by the generated translation units (src/cuda/generated/), one per
// (arch, dtype, head_dim, direction).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_bwd/kernel.cuh"
#include "cuda/flash_bwd/launch.hpp"
#include "cuda/flash_bwd/plan.hpp"
#include "cuda/flash_bwd/prepare.cuh"

namespace fastattn::cuda {

template <typename Element, int kHeadDim>
struct BackwardConfig {
  static constexpr BackwardBlocks kBlocks = backward_blocks(kHeadDim);
  using Traits = BackwardTraits<kHeadDim, kBlocks.block_m, kBlocks.block_n, kBlocks.warps, kBlocks.warps_sdp_m,
                                kBlocks.warps_kv_n, kBlocks.warps_dq_m, kBlocks.stages, Element>;
};

template <typename Element, int kHeadDim>
void run_backward(const BackwardParams& p, cudaStream_t stream) {
  using T = typename BackwardConfig<Element, kHeadDim>::Traits;
  const std::string config = "d" + std::to_string(kHeadDim) + ", " + std::to_string(T::kBlockM) + "x" +
                             std::to_string(T::kBlockN) + (p.deterministic ? ", deterministic" : "");
  if (p.total_q > 0) {
    const int64_t dq_elems = p.total_q * p.num_heads * kHeadDim * static_cast<int64_t>(p.num_splits);
    check(cudaMemsetAsync(p.dq_accum, 0, static_cast<size_t>(dq_elems) * sizeof(float), stream), "cudaMemsetAsync",
          "dQ accumulator, " + config);
    constexpr int kThreads = 256;
    constexpr int kChunks = kHeadDim / 8;
    constexpr int kLanes = kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
    const int64_t items = p.total_q * p.num_heads;
    const int64_t blocks = (items + kThreads / kLanes - 1) / (kThreads / kLanes);
    backward_dot_kernel<Element, kHeadDim><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    check_launch("backward_dot_kernel<" + config + ">");
  }
  const int n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
  if (n_blocks > 0 && p.batch > 0) {
    const int grid_x = p.deterministic ? p.num_splits : n_blocks;
    const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.num_kv_heads),
                    static_cast<unsigned>(p.batch));
    auto kernel = p.softcap > 0.0f ? flash_backward_kernel<T, true> : flash_backward_kernel<T, false>;
    const std::string name = "flash_backward_kernel<" + config + ">";
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
          "cudaFuncSetAttribute", name);
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
    check_launch(name);
  }
  if (p.total_q > 0) {
    constexpr int kThreads = 256;
    const int64_t items = p.total_q * p.num_heads * (kHeadDim / 4);
    const int64_t blocks = (items + kThreads - 1) / kThreads;
    backward_convert_dq_kernel<Element, kHeadDim><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    check_launch("backward_convert_dq_kernel<" + config + ">");
  }
}

}  // namespace fastattn::cuda
