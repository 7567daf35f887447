// launch.hpp — host-side declaration of the sm90 forward launchers (one generated unit per
// dtype and head dim: tools/gen_cuda_kernels.py). `choice` is the dispatcher's plan
// (flash_fwd/heuristics.hpp: plan_forward_sm90).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"

namespace fastattn::cuda {

template <typename Element, int kHeadDim>
void run_forward_sm90(const ForwardParams& p, const Sm90LaunchChoice& choice, cudaStream_t stream);

// choice.scheduler == dynamic (called by run_forward_sm90 once it found work; units
// flash_fwd_sm90_dynamic_*, launch_dynamic.cuh).
template <typename Element, int kHeadDim>
void run_forward_sm90_dynamic(const ForwardParams& p, const Sm90LaunchChoice& choice, cudaStream_t stream);

}  // namespace fastattn::cuda
