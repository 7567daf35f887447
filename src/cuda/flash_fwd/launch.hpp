// launch.hpp — host-side declaration of the forward launchers (defined per generated TU).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_fwd/launch_blocks.hpp"
#include "cuda/flash_fwd/params.hpp"

namespace fastattn::cuda {

template <typename Element, int kHeadDim>
void run_forward(const ForwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
