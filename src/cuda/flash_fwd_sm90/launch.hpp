// launch.hpp — host-side declaration of the sm90 forward launchers (one generated unit per
// dtype and head dim: tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_fwd/params.hpp"

namespace fastattn::cuda {

template <typename Element, int kHeadDim>
void run_forward_sm90(const ForwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
