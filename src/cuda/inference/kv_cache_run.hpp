// kv_cache_run.hpp — host-side declaration of the KV-cache attention launchers, defined per
// (element, head_dim) in the generated units (src/cuda/generated/flash_kvc_sm80_*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/inference/kv_cache_params.hpp"

namespace fastattn::cuda {

// Enqueues work that must run before the attention on its stream (kv_cache.cu: the append).
using KVCacheBeforeAttention = void (*)(const KVCacheParams& p, cudaStream_t stream);

// Attention (and the split combine) of p with the plan's row tile (16, 32, 64 or 128 rows) and
// K/V ring (kv_stages, kv_reduced_stages, or kv_deep_stages for 16 rows). before_attention (may
// be null) is called after every check and cudaFuncSetAttribute that can fail and just before
// the attention launch, so a call that throws has enqueued nothing (the append writes nothing).
template <typename Element, int kHeadDim>
void run_kv_cache(const KVCacheParams& p, int rows_per_tile, int stages, KVCacheBeforeAttention before_attention,
                  cudaStream_t stream);

}  // namespace fastattn::cuda
