// cuda_backend.hpp — the CUDA backend's entry points (plain C++: no CUDA headers here).
#pragma once

#include <string>
#include <vector>

#include "common/problem.hpp"
#include "cuda/flash_bwd/plan.hpp"
#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"
#include "fastattn/options.hpp"

namespace fastattn::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_capability = 0;  // e.g. 90
  int multiprocessors = 0;
  std::size_t memory_bytes = 0;
};

std::vector<DeviceInfo> devices();          // empty when no driver or GPU
int multiprocessor_count(int device);       // cached; throws on a CUDA error
int shared_memory_per_block(int device);   // opt-in maximum, bytes; cached; throws on a CUDA error
int compute_capability(int device);        // major * 10 + minor; cached; throws on a CUDA error
int shared_memory_per_multiprocessor(int device);  // bytes; cached; throws on a CUDA error
std::vector<std::string> compiled_archs();  // e.g. {"sm80", "sm90"}
std::vector<int> compiled_head_dims();      // forward head dims in this build

// Whether this build has a forward kernel for (dtype, head_dim); dispatch errors otherwise.
bool has_forward_kernel(DType dtype, std::int64_t head_dim);

// The forward path for a device (forward_path.hpp: its compute capability, or
// FASTATTN_CUDA_PATH); throws invalid_argument for a bad variable, unsupported for a path the
// device cannot run. Whether this build compiled a path's units (sm80: an architecture >= 80 in
// FASTATTN_CUDA_ARCHS; sm75 / sm70: FASTATTN_CUDA_LOWRES_PATHS or their architecture), and the
// CMake architectures they were compiled for ("75;90"; forward_path.hpp: archs_run_on).
ForwardPath forward_path(int device);
// The backward's path: forward_path's, with sm90 mapped to sm80 (forward_path.hpp: backward_path_for).
ForwardPath backward_path(int device);
bool path_compiled(ForwardPath path);
std::string path_archs(ForwardPath path);
// archs_run_on(path_archs(path), the device's compute capability), cached per (path, device).
bool path_runs_on(ForwardPath path, int device);

// The forward's launch plan (flash_fwd/heuristics.hpp: route, kernel, split-KV count, scratch
// bytes) for this problem on its device; the dispatcher reports it (KernelChoice) and hands the
// same plan to forward(), which runs it as is (planned once per call).
ForwardPlan forward_plan(const AttentionProblem& p);

void forward(const AttentionProblem& p, const ForwardPlan& plan);

// Backward (cuda_backward.cu): the same head dims and dtypes as the forward; the plan
// (flash_bwd/plan.hpp: blocks, deterministic split count, scratch bytes) for this problem.
bool has_backward_kernel(DType dtype, std::int64_t head_dim);
BackwardPlan backward_plan(const AttentionProblem& p);
void backward(const AttentionProblem& p, const KernelChoice& choice);

}  // namespace fastattn::cuda
