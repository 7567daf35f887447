// kv_cache_route.hpp — which kernel runs a KV-cache call, and why (fastattn/kv_cache.hpp). One
// function decides, from the validated problem's shape and the longest cache it is planned for
// (never from seqlens / block_table values), so an eager call and a KVCachePlan decide alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/cpu_backend.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "fastattn/kv_cache.hpp"
#include "fastattn/options.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn {

enum class KVCacheKernel {
  reference,    // float64 over the gathered keys (inference/kv_cache_gather.hpp)
  cpu_decode,   // the CPU decode kernel reading the pages (cpu/decode_kernel.hpp)
  cpu_prefill,  // per sequence: visible pages gathered, then the CPU prefill kernel (cpu/kv_cache.hpp)
  cuda,         // cuda::kv_cache_forward (src/cuda/inference/kv_cache.hpp)
};

struct KVCacheRoute {
  KVCacheKernel kernel = KVCacheKernel::reference;
  KernelChoice choice;             // what the call reports
  std::int64_t max_cache_len = 0;  // the longest cache the split counts are sized for
  int threads = 0;                 // CPU threads
  // cpu_decode
  cpu::Isa isa = cpu::Isa::none;
  cpu::DecodePlan decode;
  cpu::DecodeScratchSize decode_scratch;
  // cpu_prefill: the prefill kernel of one sequence, and the gather scratch
  KernelChoice forward_choice;  // its report
  cpu::CpuKernelPlan forward_plan;  // what runs (dispatch.cpp)
  std::size_t gather_bytes = 0;
  // cuda
  cuda::KVCacheLaunch launch;

  // Host scratch of a CPU call: the decode partials and per-thread tiles, or the gather.
  std::size_t host_scratch_bytes() const;
};

// Chooses the route of `p` for caches of up to max_cache_len tokens, or throws Error
// (unsupported: no kernel in this build; invalid_argument: options.backend for the device).
KVCacheRoute choose_kv_cache_route(const KVCacheProblem& p, Backend requested, std::int64_t max_cache_len);

// A plan's route (KVCachePlan, and the cooperative step's PartialRunner): the shape checked
// (Error naming shape.<field>), the problem it stands for, and the route for caches of up to
// shape.max_cache_len tokens (0: the capacity).
struct PlannedKVCacheRoute {
  KVCacheProblem problem;
  KVCacheRoute route;
};
PlannedKVCacheRoute plan_kv_cache_route(const KVCacheShape& shape, const AttentionOptions& options);

// Device memory a CUDA call needs resident (fastattn/memory.hpp): q, out, lse, the whole cache
// (k and v), seqlens, block_table, append.k / append.v, plus the scratch.
std::size_t kv_cache_tensor_bytes(const KVCacheProblem& p, bool with_lse);

}  // namespace fastattn
