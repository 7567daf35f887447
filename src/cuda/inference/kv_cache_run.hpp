// kv_cache_run.hpp — host-side declaration of the KV-cache attention launchers, defined per
// (element, head_dim) in the generated units (src/cuda/generated/flash_kvc_sm80_*.cu).
#pragma once

#include <cuda_runtime.h>

#include "cuda/inference/kv_cache_params.hpp"

namespace fastattn::cuda {

// Attention (and the split combine) of p with the plan's row tile (16, 32, 64 or 128 rows) and
// K/V ring (kv_stages, or kv_deep_stages for 16 rows); the append, when any, ran before on the
// same stream (kv_cache.cu).
template <typename Element, int kHeadDim>
void run_kv_cache(const KVCacheParams& p, int rows_per_tile, int stages, cudaStream_t stream);

}  // namespace fastattn::cuda
