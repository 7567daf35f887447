// launch.cuh — tile configuration per (element, head_dim) and the backward launcher.
// Included only by the generated translation units (src/cuda/generated/), one per
// (arch, dtype, head_dim, direction).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/flash_bwd/kernel.cuh"
#include "cuda/flash_bwd/launch.hpp"
#include "cuda/flash_bwd/plan.hpp"
#include "cuda/flash_bwd/prepare.cuh"

namespace fastattn::cuda {

// The tiles of one (path, element, head_dim): plan.hpp's blocks for it, and the path's
// per-arch parts. kSmall: the configuration for GPUs with 99 KB of shared memory per block.
template <ForwardPath kPath, typename Element, int kHeadDim, bool kSmall = false>
struct BackwardConfig {
  static constexpr BackwardBlocks kBlocks = kPath == ForwardPath::sm75   ? backward_blocks_sm75(kHeadDim)
                                            : kPath == ForwardPath::sm70 ? backward_blocks_sm70(kHeadDim)
                                            : kSmall                     ? backward_blocks_small(kHeadDim)
                                                                         : backward_blocks(kHeadDim);
  using Arch = std::conditional_t<kPath == ForwardPath::sm75, Sm75Backward,
                                  std::conditional_t<kPath == ForwardPath::sm70, Sm70Backward, Sm80Backward>>;
  using Traits = BackwardTraits<kHeadDim, kBlocks.block_m, kBlocks.block_n, kBlocks.warps, kBlocks.warps_sdp_m,
                                kBlocks.warps_kv_n, kBlocks.warps_dq_m, kBlocks.stages, Element, kBlocks.dq_before_dk,
                                Arch>;
  static_assert(Traits::kSmemBytes == backward_smem_bytes(kBlocks, kHeadDim, kPath == ForwardPath::sm70),
                "plan.hpp's shared-memory count");
};

template <class T>
void run_backward_with(const BackwardParams& p, cudaStream_t stream);

template <ForwardPath kPath, typename Element, int kHeadDim>
void run_backward(const BackwardParams& p, cudaStream_t stream) {
  if constexpr (kPath == ForwardPath::sm75 || kPath == ForwardPath::sm70) {
    static_assert(has_sm75_backward_blocks(kHeadDim) && has_sm70_backward_blocks(kHeadDim),
                  "the sm75 and sm70 backward stop at head_dim 128");
    return run_backward_with<typename BackwardConfig<kPath, Element, kHeadDim>::Traits>(p, stream);
  } else {
    if (p.small_blocks) {
      if constexpr (has_small_backward_blocks(kHeadDim)) {
        return run_backward_with<typename BackwardConfig<kPath, Element, kHeadDim, true>::Traits>(p, stream);
      } else {
        throw Error(ErrorCode::internal, "cuda backward: no small configuration for head_dim " +
                                             std::to_string(kHeadDim));
      }
    }
    run_backward_with<typename BackwardConfig<kPath, Element, kHeadDim>::Traits>(p, stream);
  }
}

template <class T>
void run_backward_with(const BackwardParams& p, cudaStream_t stream) {
  using Element = typename T::Element;
  constexpr int kHeadDim = T::kHeadDim;
  const std::string config = std::string(to_string(T::Arch::kPath)) + " d" + std::to_string(kHeadDim) + ", " +
                             std::to_string(T::kBlockM) + "x" +
                             std::to_string(T::kBlockN) + (p.small_blocks ? ", small-smem" : "") +
                             (p.deterministic ? ", deterministic" : "") +
                             (p.tile_grid ? ", tile grid" : "") +
                             (p.tail_pieces > 1 ? ", tail split " + std::to_string(p.tail_tiles) + " x " +
                                                      std::to_string(p.tail_pieces)
                                                : std::string());
  // The default tiles need sm80/sm90-class shared memory (up to 162 KB per block); the plan
  // takes the small ones where that does not fit (sm86/sm89: 99 KB), and d = 256 has none.
  // Checked before anything is launched, so the error names the need instead of a failed
  // cudaFuncSetAttribute.
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice", config);
  const int smem_optin = shared_memory_per_block(device);
  if (T::kSmemBytes > smem_optin) {
    throw Error(ErrorCode::unsupported,
                "cuda backward: expected a GPU with " + std::to_string(T::kSmemBytes) +
                    " bytes of shared memory per block for head_dim " + std::to_string(kHeadDim) +
                    ", got " + std::to_string(smem_optin) + " on device " + std::to_string(device));
  }
  if (p.total_q > 0) {
    // The dQ accumulator(s), and with the tail split its dK/dV partials and counters.
    check(cudaMemsetAsync(p.dq_accum, 0, p.zero_bytes, stream), "cudaMemsetAsync", "dQ accumulator, " + config);
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
    dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.batch));
    if (p.tile_grid) {  // whole tiles, then the tail tiles' pieces (plan.hpp: plan_tile_grid)
      const int64_t pieces = p.tail_pieces > 1 ? p.tail_tiles * p.tail_pieces : 0;
      if (p.grid_n_blocks != n_blocks || p.main_tiles + p.tail_tiles != int64_t{n_blocks} * p.num_kv_heads * p.batch ||
          p.main_tiles + pieces > INT32_MAX) {
        throw Error(ErrorCode::internal, "cuda backward: tile grid planned for another grid, " + config);
      }
      grid = dim3(static_cast<unsigned>(p.main_tiles + pieces));
    }
    auto kernel = p.softcap > 0.0f
                      ? (p.tile_grid ? flash_backward_kernel<T, true, true> : flash_backward_kernel<T, true, false>)
                      : (p.tile_grid ? flash_backward_kernel<T, false, true> : flash_backward_kernel<T, false, false>);
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
