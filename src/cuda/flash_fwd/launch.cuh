// launch.cuh — tile configuration per (element, head_dim) and the forward launcher.
// Included only by the generated translation units (src/cuda/generated/), one per
// (arch, dtype, head_dim, direction).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_fwd/kernel.cuh"
#include "cuda/flash_fwd/launch.hpp"

namespace fastattn::cuda {

// (kBlockM, kBlockN, warps) per head_dim come from forward_blocks (launch_blocks.hpp), as in
// flash-attn 2's sm80 forward: the O accumulator (kBlockM / warps rows x head_dim) stays in
// registers and two CTAs fit one SM.
template <typename Element, int kHeadDim>
struct ForwardConfig {
  static constexpr ForwardBlocks kBlocks = forward_blocks(kHeadDim);
  using Traits = ForwardTraits<kHeadDim, kBlocks.block_m, kBlocks.block_n, kBlocks.threads / 32, Element>;
};

template <typename Element, int kHeadDim>
void run_forward(const ForwardParams& p, cudaStream_t stream) {
  using T = typename ForwardConfig<Element, kHeadDim>::Traits;
  const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  if (m_blocks == 0 || p.batch == 0) return;
  const dim3 grid(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  auto kernel = p.softcap > 0.0f ? flash_forward_kernel<T, true> : flash_forward_kernel<T, false>;
  const std::string name = "flash_forward_kernel<d" + std::to_string(kHeadDim) + ", " +
                           std::to_string(T::kBlockM) + "x" + std::to_string(T::kBlockN) + ">";
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
        "cudaFuncSetAttribute", name);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch(name);
}

}  // namespace fastattn::cuda
