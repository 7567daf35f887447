// launch_dynamic.cuh — the sm90 forward launcher under the dynamic tile scheduler
// (kernel_dynamic.cuh): launch.cuh's setup, the tile counter zeroed on the call's stream, the
// dynamic kernel. Included only by the generated units src/cuda/generated/flash_fwd_sm90_dynamic_*
// (sm_90a alone), so the grid/persistent units compile as before.
#pragma once

#include <cuda_runtime.h>

#include <limits>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_fwd_sm90/kernel_dynamic.cuh"
#include "cuda/flash_fwd_sm90/launch.cuh"
#include "cuda/flash_fwd_sm90/launch.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/flash_fwd_sm90/traits.cuh"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// The dynamic kernel of one (softcap, overlap) pair, padded or varlen.
template <class T, bool kVarlen>
auto sm90_forward_dynamic_kernel(bool softcap, bool overlap) {
  auto kernel = softcap ? flash_forward_sm90_dynamic_kernel<T, true, false, kVarlen>
                        : flash_forward_sm90_dynamic_kernel<T, false, false, kVarlen>;
  if constexpr (T::kOverlapFits) {  // no spilling overlap kernels compiled otherwise
    if (overlap) {
      kernel = softcap ? flash_forward_sm90_dynamic_kernel<T, true, true, kVarlen>
                       : flash_forward_sm90_dynamic_kernel<T, false, true, kVarlen>;
    }
  }
  return kernel;
}

// Called by run_forward_sm90 (launch.cuh) once sm90_forward_has_work(p).
template <typename Element, int kHeadDim>
void run_forward_sm90_dynamic(const ForwardParams& p, const Sm90LaunchChoice& choice, cudaStream_t stream) {
  using T = Sm90ForwardTraits<kHeadDim, Element>;
  if (choice.tile_counter == nullptr) {  // the plan's workspace (heuristics.hpp) holds it
    throw Error(ErrorCode::internal, "cuda forward (sm90): the dynamic scheduler got no tile counter");
  }
  Sm90LaunchChoice plain = choice;
  plain.wg_order = false;   // the dynamic kernels issue unordered (the plan never asks otherwise)
  plain.tma_store = false;  // and store from registers (epilogue.cuh)
  const Sm90ForwardSetup s = sm90_forward_setup<T>(p, plain);
  if (s.schedule.num_tiles > std::numeric_limits<int>::max()) {  // kernel_dynamic.cuh decodes in 32 bits
    throw Error(ErrorCode::unsupported, "cuda forward (sm90): the dynamic tile scheduler takes at most 2^31 - 1 tiles, got " +
                                            std::to_string(s.schedule.num_tiles) + " (" + kSm90SchedulerEnv + "=dynamic)");
  }
  auto kernel = sm90_forward_dynamic_kernel<T, false>(s.softcap, s.overlap);
  if constexpr (kSm90Varlen) {  // switched off: no varlen kernel compiled
    if (s.varlen) kernel = sm90_forward_dynamic_kernel<T, true>(s.softcap, s.overlap);
  }
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
        "cudaFuncSetAttribute", s.name);
  // Every launch counts from zero: the memset is ordered before the kernel on the call's stream
  // (and becomes a memset node when the call is captured into a CUDA graph).
  auto* counter = static_cast<unsigned long long*>(choice.tile_counter);
  check(cudaMemsetAsync(counter, 0, sizeof(unsigned long long), stream), "cudaMemsetAsync", s.name + " tile counter");
  kernel<<<s.grid, T::kThreads, T::kSmemBytes, stream>>>(p, s.schedule, s.map_q, s.map_k, s.map_v, counter);
  check_launch(s.name);
}

}  // namespace fastattn::cuda
