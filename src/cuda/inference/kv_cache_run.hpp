// kv_cache_run.hpp — host-side declaration of the KV-cache attention's kernels, resolved per
// (element, head_dim) in the generated units (src/cuda/generated/flash_kvc_sm80_*.cu).
#pragma once

#include "cuda/inference/kv_cache.hpp"

namespace fastattn::cuda {

// The kernels of one launch plan: the attention kernel of the plan's row tile, K/V ring and
// soft-cap flag, and the combine kernel (used when num_splits > 1), with the shared memory the
// attention kernel takes. Resolved on the host when the plan is made (kv_cache_plan), which also
// sets the attention kernel's shared-memory attribute on the plan's device, so a run only
// launches (cudaLaunchKernel on these pointers). Throws Error(internal) for a row tile or ring
// the head dim has not (or TMA loads on the reduced ring).
template <typename Element, int kHeadDim>
KVCacheKernels kv_cache_kernels(int rows_per_tile, int stages, bool softcap, KVLoad load);

}  // namespace fastattn::cuda
