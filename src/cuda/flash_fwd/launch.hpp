// launch.hpp — host-side declaration of the forward launchers (defined per generated TU).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_fwd/launch_blocks.hpp"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/forward_path.hpp"

namespace fastattn::cuda {

// kPath: the per-architecture parts (forward_path.hpp); the sm75 and sm70 units exist for
// __half only.
template <ForwardPath kPath, typename Element, int kHeadDim>
void run_forward(const ForwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
