// kv_cache_launch.cuh — the KV-cache attention launcher per (element, head_dim): the row tile
// the plan chose, soft-cap or not, then the combine kernel when the keys are split. Included
// only by the generated units (src/cuda/generated/flash_kvc_sm80_*.cu, tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/inference/kv_cache_combine.cuh"
#include "cuda/inference/kv_cache_kernel.cuh"
#include "cuda/inference/kv_cache_run.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// grid = (row blocks * num_splits, kv_heads, batch): the kernel's tile scheduler. The shared
// memory attribute is set (and can fail) before before_attention enqueues anything.
template <class T>
void launch_kv_cache_attention(const KVCacheParams& p, KVCacheBeforeAttention before_attention, cudaStream_t stream) {
  auto kernel = p.softcap > 0.0f ? kv_cache_attention_kernel<T, true> : kv_cache_attention_kernel<T, false>;
  const dim3 grid(static_cast<unsigned>(p.row_blocks) * static_cast<unsigned>(p.num_splits),
                  static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.batch));
  const std::string name = "kv_cache_attention_kernel<d" + std::to_string(T::kHeadDim) + ", " +
                           std::to_string(T::kBlockM) + " rows x " + std::to_string(T::kBlockN) + " keys, " +
                           std::to_string(T::kStages) + " stages, " +
                           std::to_string(p.num_splits) + " splits>";
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
        "cudaFuncSetAttribute", name);
  if (before_attention != nullptr) before_attention(p, stream);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  check_launch(name);
}

// The kRows-row tile with the ring `stages` (run_kv_cache checked it is one of the tile's).
template <typename Element, int kHeadDim, int kRows>
void launch_kv_cache_rows(const KVCacheParams& p, int stages, KVCacheBeforeAttention before_attention,
                          cudaStream_t stream) {
  constexpr int kDeep = kv_deep_stages(kHeadDim);
  constexpr int kReduced = kv_reduced_stages(kHeadDim);
  if constexpr (kRows == 16 && kDeep != 0) {
    if (stages == kDeep) {
      return launch_kv_cache_attention<KVCacheTraits<Element, kHeadDim, 16, kDeep>>(p, before_attention, stream);
    }
  }
  if constexpr (kReduced != 0) {
    if (stages == kReduced) {
      return launch_kv_cache_attention<KVCacheTraits<Element, kHeadDim, kRows, kReduced>>(p, before_attention, stream);
    }
  }
  launch_kv_cache_attention<KVCacheTraits<Element, kHeadDim, kRows>>(p, before_attention, stream);
}

template <typename Element, int kHeadDim>
void run_kv_cache(const KVCacheParams& p, int rows_per_tile, int stages, KVCacheBeforeAttention before_attention,
                  cudaStream_t stream) {
  constexpr int kDeep = kv_deep_stages(kHeadDim);
  constexpr int kReduced = kv_reduced_stages(kHeadDim);
  if (stages != kv_stages(kHeadDim) && !(kReduced != 0 && stages == kReduced) &&
      !(rows_per_tile == 16 && kDeep != 0 && stages == kDeep)) {
    throw Error(ErrorCode::internal, "kv_cache: no " + std::to_string(stages) + "-stage ring for " +
                                         std::to_string(rows_per_tile) + " rows at head_dim " + std::to_string(kHeadDim));
  }
  if (p.batch == 0 || p.rows == 0 || p.num_kv_heads == 0) {
    if (before_attention != nullptr) before_attention(p, stream);
    return;
  }
  switch (rows_per_tile) {
    case 16: launch_kv_cache_rows<Element, kHeadDim, 16>(p, stages, before_attention, stream); break;
    case 32: launch_kv_cache_rows<Element, kHeadDim, 32>(p, stages, before_attention, stream); break;
    case 64: launch_kv_cache_rows<Element, kHeadDim, 64>(p, stages, before_attention, stream); break;
    case 128:
      if constexpr (kv_max_rows_per_tile(kHeadDim) >= 128) {
        launch_kv_cache_rows<Element, kHeadDim, 128>(p, stages, before_attention, stream);
        break;
      }
      [[fallthrough]];
    default:
      throw Error(ErrorCode::internal, "kv_cache: no " + std::to_string(rows_per_tile) + "-row tile at head_dim " +
                                           std::to_string(kHeadDim));
  }
  if (p.num_splits > 1) {
    const dim3 grid(static_cast<unsigned>((p.rows + kKVCombineWarps - 1) / kKVCombineWarps),
                    static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.batch));
    kv_cache_combine_kernel<Element, kHeadDim><<<grid, kKVCombineWarps * 32, 0, stream>>>(p);
    check_launch("kv_cache_combine_kernel<d" + std::to_string(kHeadDim) + ", " + std::to_string(p.num_splits) +
                 " splits>");
  }
}

}  // namespace fastattn::cuda
