// launch.hpp — the backward launcher, instantiated once per (dtype, head_dim) in
// src/cuda/generated/ (tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_bwd/params.hpp"

namespace fastattn::cuda {

// Runs the three backward kernels on `stream`: D = rowsum(dO * O), the main kernel, the dQ
// convert. p.d_sum and p.dq_accum point into scratch sized by plan_backward (plan.hpp).
template <typename Element, int kHeadDim>
void run_backward(const BackwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
