// kv_cache.hpp — the CUDA KV-cache attention's plan and entry points (plain C++: no CUDA
// headers, so the API layer and host-only tests include it). Kernels in src/cuda/inference/.
#pragma once

#include <cstddef>
#include <string>

#include "cuda/inference/kv_cache_heuristics.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn::cuda {

// The kernels a launch plan runs, resolved when it is made (kv_cache_run.hpp): pointers to
// __global__ functions, launched with cudaLaunchKernel, and the launch shape, so a run makes no
// host decision (no dispatch on tiles, no cudaFuncSetAttribute, no string).
struct KVCacheKernels {
  const void* attention = nullptr;  // kv_cache_attention_kernel<traits, softcap>
  const void* combine = nullptr;    // kv_cache_combine_kernel<Element, head_dim>
  int attention_threads = 0;
  int attention_smem_bytes = 0;     // dynamic shared memory (its attribute set at plan time)
  int combine_threads = 0;
  int combine_rows_per_cta = 0;     // packed rows per combine CTA
  bool softcap = false;             // the attention kernel's soft-cap form
};

// The launch plan of a KV-cache call: made on the host once (KVCachePlan) or per eager call,
// from the shape only (never from seqlens / block_table values), so a run can be captured in a
// CUDA graph. The kernel names and split heuristic live in src/cuda/inference/.
struct KVCacheLaunch {
  int num_splits = 1;             // key splits per (batch, KV head); 1: no combine
  KVCombine combine = KVCombine::none;  // how the splits are merged (kv_cache_heuristics.hpp)
  int rows_per_tile = 0;          // query rows (GQA-packed heads x tokens) per CTA tile
  int block_k = 0;                // keys per tile
  std::size_t scratch_bytes = 0;  // split partials and counters (0 when num_splits == 1), 256-byte aligned
  std::size_t counter_offset = 0; // the fused combine's counters in the scratch (kv_counter_offset)
  std::size_t counter_bytes = 0;  // 0: none (no split, or the combine kernel)
  // Depth of the K/V cp.async ring (kv_cache_heuristics.hpp: kv_stages; 16-row tiles also take
  // kv_deep_stages). Set by kv_cache_plan; a benchmark may pick another ring, then calls
  // kv_cache_select_kernels.
  int stages = 0;
  // How K/V tiles are loaded (kv_cache_heuristics.hpp: KVLoad): cp.async, or TMA with
  // FASTATTN_CUDA_KV_LOAD=tma where it can serve the cache (kKVTmaByDefault is false). A test or
  // benchmark may change it (then calls kv_cache_select_kernels): to TMA only where the plan
  // would take it under FASTATTN_CUDA_KV_LOAD=tma (kv_cache_forward checks the page size only).
  KVLoad load = KVLoad::cp_async;
  // A programmatic dependent launch (sm90, unless FASTATTN_CUDA_KV_PDL=0; kv_cache_plan.cu): the
  // attention's CTAs launch while the kernel before them on the stream finishes.
  bool pdl = false;
  KVCacheKernels kernels;         // for rows_per_tile, stages, load and the call's softcap
  int device = -1;                // the device kernels' attribute was set on
  std::string kernel;             // e.g. "cuda.kv_cache.sm80.bf16.d128.gqa4.split8"
  std::string reason;             // why this kernel and split count, in one sentence
};

// Plans from the shape in p (its seqlens / block_table pointers are not read);
// max_cache_len: the longest cache the plan will see (sizes num_splits).
KVCacheLaunch kv_cache_plan(const KVCacheProblem& p, std::int64_t max_cache_len);

// The shape limits of the kernels' grid and 32-bit positions; throws unsupported naming them
// (kv_cache_plan and kv_cache_forward check them).
void kv_cache_check_limits(const KVCacheProblem& p);

// Resolves launch.kernels for launch.rows_per_tile / launch.stages / launch.load and p's dtype,
// head_dim and softcap, and sets the attention kernel's shared-memory attribute on p's device (kv_cache_plan
// calls it; a benchmark that changes launch.stages calls it again). Throws Error.
void kv_cache_select_kernels(const KVCacheProblem& p, KVCacheLaunch& launch);

// What a launch may assume of its scratch's fused-combine counters (KVCacheLaunch::counter_*):
// fresh scratch (an eager call's, from a pool) gets them zeroed by a memset node before the
// attention; a plan's scratch was zeroed when the plan was made (kv_cache_zero_counters) and
// every launch leaves them zero.
enum class KVScratch { fresh, counters_zeroed };

// Appends k_new / v_new (when p.seqlen_new > 0) at seqlens[b], then attends; asynchronous on
// p.attn.cuda_stream, no allocation, no host synchronisation. scratch: launch.scratch_bytes of
// device memory (null when 0). Throws Error(device_error) when a CUDA call or launch fails.
void kv_cache_forward(const KVCacheProblem& p, const KVCacheLaunch& launch, void* scratch,
                      KVScratch state = KVScratch::fresh);

// Zeroes the fused combine's counters in a plan's scratch, synchronously (plan time, before any
// capture); nothing when launch.counter_bytes is 0.
void kv_cache_zero_counters(const KVCacheLaunch& launch, void* scratch, int device);

}  // namespace fastattn::cuda
