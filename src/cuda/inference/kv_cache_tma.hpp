// kv_cache_tma.hpp — the TMA tensor maps of a KV cache (host and device), for the KV-cache
// kernel's TMA loads (kv_cache_heuristics.hpp: KVLoad::tma; kv_cache_kernel.cuh).
//
// K and V each as a 4-D tensor (head_dim, page_size, kv_heads, num_pages), innermost first, in
// boxes of (64, kv_block_n, 1, 1): one 64-column panel of a whole key tile of one KV head in one
// page. The contiguous cache is the paged one with page b per sequence (page_size = capacity),
// so one description serves both. Rows past page_size read as zeros (TMA's out-of-bounds
// fill); rows past a sequence's length inside its page are zeroed by the kernel.
#pragma once

#include <cuda.h>

namespace fastattn::cuda {

// Kernel parameter (__grid_constant__): what cp.async.bulk.tensor takes the address of.
struct KVTensorMaps {
  CUtensorMap k;
  CUtensorMap v;
};

}  // namespace fastattn::cuda
