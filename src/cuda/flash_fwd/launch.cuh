// launch.cuh — tile configuration per (path, element, head_dim) and the forward launcher.
// Included only by the generated translation units (src/cuda/generated/), one per
// (arch, dtype, head_dim, direction); each instantiates the main kernel, the short-query kernel
// (sm80 path only) and the combine kernel of its (dtype, head_dim).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_fwd/combine.cuh"
#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/flash_fwd/kernel.cuh"
#include "cuda/flash_fwd/kernel_decode.cuh"
#include "cuda/flash_fwd/launch.hpp"

namespace fastattn::cuda {

// (kBlockM, kBlockN, warps) per head_dim come from forward_blocks (launch_blocks.hpp), as in
// flash-attn 2's sm80 forward: the O accumulator (kBlockM / warps rows x head_dim) stays in
// registers and two CTAs fit one SM.
template <ForwardPath kPath>
struct ArchFor {
  using type = Sm80Forward;
};
template <>
struct ArchFor<ForwardPath::sm75> {
  using type = Sm75Forward;
};
template <>
struct ArchFor<ForwardPath::sm70> {
  using type = Sm70Forward;
};

template <typename Element, int kHeadDim, ForwardPath kPath = ForwardPath::sm80>
struct ForwardConfig {
  static constexpr ForwardBlocks kBlocks = forward_blocks_for(kPath, kHeadDim);
  using Traits = ForwardTraits<kHeadDim, kBlocks.block_m, kBlocks.block_n, kBlocks.threads / 32, Element, 1,
                               typename ArchFor<kPath>::type>;
  static_assert(Traits::kSmemBytes == forward_smem_bytes_for(kPath, kBlocks, kHeadDim),
                "heuristics.hpp sizes occupancy from forward_smem_bytes_for");
  // Before sm80 the MMAs take f16 only (the sm75/sm70 atoms would run bf16 bits as f16).
  static_assert(kPath == ForwardPath::sm80 || std::is_same_v<Element, __half>, "the sm75/sm70 paths are f16 only");
};

// The short-query kernel: one warp, 16 rows, a kDecodeStages-deep (K, V) ring (launch_blocks.hpp).
template <typename Element, int kHeadDim>
struct DecodeConfig {
  static constexpr ForwardBlocks kBlocks = decode_blocks(kHeadDim);
  using Traits = ForwardTraits<kHeadDim, kBlocks.block_m, kBlocks.block_n, kBlocks.threads / 32, Element, kDecodeStages>;
  static_assert(Traits::kSmemBytes == forward_smem_bytes(kBlocks, kHeadDim, kDecodeStages),
                "heuristics.hpp sizes occupancy from forward_smem_bytes");
};

// grid = (query blocks * num_splits, heads, batch); see the kernels' tile schedulers.
template <class T, class Kernel>
void launch_forward_kernel(Kernel kernel, const char* what, const ForwardParams& p, cudaStream_t stream) {
  const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const dim3 grid(static_cast<unsigned>(m_blocks) * static_cast<unsigned>(p.num_splits),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  const std::string name = std::string(what) + "<d" + std::to_string(T::kHeadDim) + ", " +
                           std::to_string(T::kBlockM) + "x" + std::to_string(T::kBlockN) +
                           (p.num_splits > 1 ? ", split-KV " + std::to_string(p.num_splits) : std::string()) + ">";
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
        "cudaFuncSetAttribute", name);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch(name);
}

static_assert(kCombineMaxSplits >= kMaxSplits, "the combine kernel keeps one weight per split in shared memory");

template <ForwardPath kPath, typename Element, int kHeadDim>
void run_forward(const ForwardParams& p, cudaStream_t stream) {
  if (p.seqlen_q == 0 || p.batch == 0) return;
  const bool split = p.num_splits > 1;
  const bool softcap = p.softcap > 0.0f;
  if constexpr (kPath != ForwardPath::sm80) {
    // No short-query kernel (cp.async ring) on sm75/sm70: the plan never asks for it.
    if (p.short_query) {
      throw Error(ErrorCode::internal, std::string("cuda forward: no short-query kernel on the ") + to_string(kPath) +
                                           " path");
    }
    using T = typename ForwardConfig<Element, kHeadDim, kPath>::Traits;
    auto kernel = split ? (softcap ? flash_forward_kernel<T, true, true> : flash_forward_kernel<T, false, true>)
                        : (softcap ? flash_forward_kernel<T, true, false> : flash_forward_kernel<T, false, false>);
    launch_forward_kernel<T>(kernel, "flash_forward_kernel", p, stream);
  } else if (p.short_query) {
    using T = typename DecodeConfig<Element, kHeadDim>::Traits;
    auto kernel = split ? (softcap ? flash_decode_kernel<T, true, true> : flash_decode_kernel<T, false, true>)
                        : (softcap ? flash_decode_kernel<T, true, false> : flash_decode_kernel<T, false, false>);
    launch_forward_kernel<T>(kernel, "flash_decode_kernel", p, stream);
  } else {
    using T = typename ForwardConfig<Element, kHeadDim>::Traits;
    auto kernel = split ? (softcap ? flash_forward_kernel<T, true, true> : flash_forward_kernel<T, false, true>)
                        : (softcap ? flash_forward_kernel<T, true, false> : flash_forward_kernel<T, false, false>);
    launch_forward_kernel<T>(kernel, "flash_forward_kernel", p, stream);
  }
  if (split) {
    const dim3 grid(static_cast<unsigned>((p.seqlen_q + kCombineWarps - 1) / kCombineWarps),
                    static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
    flash_combine_kernel<Element, kHeadDim><<<grid, kCombineWarps * 32, 0, stream>>>(p);
    check_launch("flash_combine_kernel<d" + std::to_string(kHeadDim) + ", " + std::to_string(p.num_splits) + " splits>");
  }
}

}  // namespace fastattn::cuda
