// kv_cache_launch.cuh — the KV-cache attention's kernels per (element, head_dim), resolved on the
// host once per launch plan (kv_cache_run.hpp): the row tile and ring the plan chose, soft-cap
// or not, and the combine kernel for split keys. Included only by the generated units
// (src/cuda/generated/flash_kvc_sm80_*.cu, tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "cuda/inference/kv_cache_combine.cuh"
#include "cuda/inference/kv_cache_kernel.cuh"
#include "cuda/inference/kv_cache_run.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

template <class T>
KVCacheKernels kv_cache_kernels_of(bool softcap) {
  KVCacheKernels k;
  k.attention = softcap ? reinterpret_cast<const void*>(kv_cache_attention_kernel<T, true>)
                        : reinterpret_cast<const void*>(kv_cache_attention_kernel<T, false>);
  k.combine = reinterpret_cast<const void*>(kv_cache_combine_kernel<typename T::Element, T::kHeadDim>);
  k.attention_threads = T::kThreads;
  k.attention_smem_bytes = T::kSmemBytes;
  k.combine_threads = kKVCombineWarps * 32;
  k.combine_rows_per_cta = kKVCombineWarps;
  k.softcap = softcap;
  return k;
}

// The kRows-row tile with the ring `stages` and the loads `load` (kv_cache_kernels checked the
// ring is one of the tile's; TMA has the default ring and the 16-row tile's deep one).
template <typename Element, int kHeadDim, int kRows>
KVCacheKernels kv_cache_kernels_rows(int stages, bool softcap, KVLoad load) {
  constexpr int kDeep = kv_deep_stages(kHeadDim);
  constexpr int kReduced = kv_reduced_stages(kHeadDim);
  if constexpr (kRows == 16 && kDeep != 0) {
    if (stages == kDeep) {
      return load == KVLoad::tma
                 ? kv_cache_kernels_of<KVCacheTraits<Element, kHeadDim, 16, kDeep, KVLoad::tma>>(softcap)
                 : kv_cache_kernels_of<KVCacheTraits<Element, kHeadDim, 16, kDeep>>(softcap);
    }
  }
  if constexpr (kReduced != 0) {
    if (stages == kReduced) {
      if (load == KVLoad::tma) {
        throw Error(ErrorCode::internal, "kv_cache: no TMA kernel for the reduced " + std::to_string(kReduced) +
                                             "-stage ring (devices below sm90 take it)");
      }
      return kv_cache_kernels_of<KVCacheTraits<Element, kHeadDim, kRows, kReduced>>(softcap);
    }
  }
  return load == KVLoad::tma
             ? kv_cache_kernels_of<KVCacheTraits<Element, kHeadDim, kRows, kv_stages(kHeadDim), KVLoad::tma>>(softcap)
             : kv_cache_kernels_of<KVCacheTraits<Element, kHeadDim, kRows>>(softcap);
}

template <typename Element, int kHeadDim>
KVCacheKernels kv_cache_kernels(int rows_per_tile, int stages, bool softcap, KVLoad load) {
  constexpr int kDeep = kv_deep_stages(kHeadDim);
  constexpr int kReduced = kv_reduced_stages(kHeadDim);
  if (stages != kv_stages(kHeadDim) && !(kReduced != 0 && stages == kReduced) &&
      !(rows_per_tile == 16 && kDeep != 0 && stages == kDeep)) {
    throw Error(ErrorCode::internal, "kv_cache: no " + std::to_string(stages) + "-stage ring for " +
                                         std::to_string(rows_per_tile) + " rows at head_dim " + std::to_string(kHeadDim));
  }
  switch (rows_per_tile) {
    case 16: return kv_cache_kernels_rows<Element, kHeadDim, 16>(stages, softcap, load);
    case 32: return kv_cache_kernels_rows<Element, kHeadDim, 32>(stages, softcap, load);
    case 64: return kv_cache_kernels_rows<Element, kHeadDim, 64>(stages, softcap, load);
    case 128:
      if constexpr (kv_max_rows_per_tile(kHeadDim) >= 128) {
        return kv_cache_kernels_rows<Element, kHeadDim, 128>(stages, softcap, load);
      }
      break;
    default: break;
  }
  throw Error(ErrorCode::internal, "kv_cache: no " + std::to_string(rows_per_tile) + "-row tile at head_dim " +
                                       std::to_string(kHeadDim));
}

}  // namespace fastattn::cuda
