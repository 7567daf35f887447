// launch.hpp — host-side declaration of the sm90 backward launchers (one generated unit per
// dtype and head dim: tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_bwd/params.hpp"

namespace fastattn::cuda {

// Runs D = rowsum(dO * O), the sm90 main kernel and the dQ convert on `stream`; p.d_sum,
// p.dq_accum (and in deterministic mode p.dq_semaphores) point into scratch sized by
// plan_backward_sm90 (flash_bwd_sm90/plan.hpp), zeroed here from dq_accum on.
template <typename Element, int kHeadDim>
void run_backward_sm90(const BackwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
