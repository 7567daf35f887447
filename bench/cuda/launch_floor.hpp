// launch_floor.hpp — a kernel that does nothing, for the floor under a one-call timing: the
// time between two CUDA events around a launch, with no work in it (kv_cache_bench floor).
#pragma once

#include <cuda_runtime.h>

namespace fastattn::bench {

// Launches an empty kernel of grid (blocks_x, blocks_y) x 128 threads with `smem_bytes` of
// dynamic shared memory (its attribute raised once) on `stream`; throws fastattn::Error on a
// CUDA error.
void launch_empty(int blocks_x, int blocks_y, int smem_bytes, cudaStream_t stream);

}  // namespace fastattn::bench
