// launch.hpp — the backward launcher, instantiated once per (dtype, head_dim) in
// src/cuda/generated/ (tools/gen_cuda_kernels.py).
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/forward_path.hpp"

namespace fastattn::cuda {

// Runs the three backward kernels on `stream`: D = rowsum(dO * O), the main kernel, the dQ
// convert. p.d_sum and p.dq_accum point into scratch sized by plan_backward (plan.hpp).
// kPath: the per-architecture parts (sm80, or sm75 for __half at head_dim <= 128).
template <ForwardPath kPath, typename Element, int kHeadDim>
void run_backward(const BackwardParams& p, cudaStream_t stream);

}  // namespace fastattn::cuda
