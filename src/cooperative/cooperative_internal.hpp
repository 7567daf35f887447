// cooperative_internal.hpp — what the cooperative step's files share: the memory operations of
// the two tiers (CUDA or the CPU emulation), the step's plan (which pages go to which part, in
// token order), and the f32 accumulation of partial results (merge_states' formula).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cooperative/partial_runner.hpp"
#include "fastattn/cooperative.hpp"
#include "fastattn/kv_cache.hpp"

namespace fastattn::coop {

// ---- memory of the tiers (memory.cpp; CUDA in memory_cuda.cu) ---------------------------------
// Device memory on `device` (CPU: 64-byte aligned host memory), pinned host memory when `device`
// is CUDA (else aligned host memory). Throw Error(out_of_memory) naming `what` and the bytes.
void* allocate_device(Device device, std::size_t bytes, const char* what);
void free_device(Device device, void* p) noexcept;
void* allocate_host(Device device, std::size_t bytes, const char* what);
void free_host(Device device, void* p) noexcept;
// Synchronous copy of `bytes` between any two of: host memory, `device` memory.
void copy_bytes(Device device, void* dst, const void* src, std::size_t bytes);

#if FASTATTN_HAVE_CUDA
void* cuda_allocate(int ordinal, std::size_t bytes, const char* what);
void cuda_free(int ordinal, void* p) noexcept;
void* cuda_allocate_pinned(std::size_t bytes, const char* what);
void cuda_free_pinned(void* p) noexcept;
void cuda_copy(int ordinal, void* dst, const void* src, std::size_t bytes);
void cuda_zero(int ordinal, void* p, std::size_t bytes);  // synchronous cudaMemset to 0
#endif

// ---- the step's plan (step.cpp) ---------------------------------------------------------------
// A run of pages of one part, in token order: tier-local page indices and the tokens they hold
// (every page full except a sequence's last).
struct PartPages {
  std::vector<std::int32_t> local;  // indices into the tier's pool
  std::int64_t tokens = 0;
};
struct StreamChunk {
  std::vector<std::int32_t> local;  // host pool indices, copied in this order into staging
  std::vector<std::int64_t> tokens; // tokens of each page
  std::int64_t total = 0;
};
// With the forward kernel (prefill): a run of consecutive device pages, read in place as
// contiguous K/V [tokens, kv_heads, d] from page `first` of the device pool (a page's tokens
// follow the previous page's in the pool; only a sequence's last page is partial, so it can only
// end a run).
struct DeviceRun {
  std::int32_t first = 0;
  std::int64_t tokens = 0;
};
struct StepPlan {
  CooperativeSplit split;
  PartPages device;                  // part 1
  std::vector<DeviceRun> device_runs;  // part 1 with the forward kernel
  std::vector<StreamChunk> chunks;   // part 2, chunk i through staging buffer i % 2
  PartPages cpu;                     // part 3
  std::int64_t seqlen_q = 0, num_heads = 0, head_dim = 0, num_kv_heads = 0;
  bool run_device = true, run_streamed = true, run_cpu = true;
};
StepPlan make_step_plan(const TensorView& q, const CooperativeKVCache& cache, std::int64_t seq,
                        const CooperativeOptions& options);

// ---- partial results --------------------------------------------------------------------------
// acc (f32 [rows, head_dim]), acc_lse (f32 [rows]) += the partial (out [rows, head_dim] in
// `dtype`, lse [rows]), rows = seqlen_q x num_heads with out in [seqlen_q, num_heads, head_dim]
// order and lse in [num_heads, seqlen_q] order (forward()'s layouts), by merge_states' formula:
//   m = max(lse_a, lse_b); lse = m + log(exp(lse_a - m) + exp(lse_b - m));
//   acc = acc * exp(lse_a - lse) + out * exp(lse_b - lse); -inf sides contribute nothing.
void accumulate_partial_cpu(float* acc, float* acc_lse, const void* out, DType dtype, const float* lse,
                            std::int64_t seqlen_q, std::int64_t num_heads, std::int64_t head_dim);
// out (dtype, [seqlen_q, num_heads, head_dim] with q-like strides) = acc rounded once; lse = acc_lse.
void finish_partials_cpu(const float* acc, const float* acc_lse, const TensorView& out,
                         const TensorView* lse, std::int64_t seqlen_q, std::int64_t num_heads,
                         std::int64_t head_dim);

// ---- the parts' KV-cache calls (parts.cpp) -------------------------------------------------------
// With the forward kernel: K or V of `tokens` tokens from page `first` of a tier's pool, or of a
// staging buffer, as a contiguous [1, tokens, kv_heads, d] view (no copy).
TensorView pool_run_view(const CooperativeKVCache& cache, PageTier tier, bool value, std::int32_t first,
                         std::int64_t tokens);
TensorView staged_run_view(const CooperativeKVCache& cache, int buffer, bool value, std::int64_t tokens);
// forward() over one contiguous run of cached keys (all visible: options from part_options), out
// in q's dtype [1, seqlen_q, heads, d] at `out`, lse f32 [1, heads, seqlen_q] at `lse`.
void forward_part(const TensorView& q, const TensorView& k, const TensorView& v, void* out, float* lse,
                  const AttentionOptions& options);
// A part's options: options.attention without causal (cached tokens are all visible), on `backend`.
AttentionOptions part_options(const CooperativeOptions& options, Backend backend);
// A tier's pool as a one-sequence paged cache: block table [1, pool pages] at `table` (the
// part's pages first; the rest never read), seqlens [1] at `seqlen`, both on `where`.
KVCache paged_part_view(const CooperativeKVCache& cache, PageTier tier, const std::int32_t* table,
                        const std::int32_t* seqlen, Device where);
// Staging buffer `buffer` as a contiguous one-sequence cache (capacity: staging tokens).
KVCache staged_part_view(const CooperativeKVCache& cache, int buffer, const std::int32_t* seqlen);
// A part planned once for q's shape over `kv` (split counts sized for its whole pool / buffer):
// its run writes an f32 partial where the route allows (partial_runner.hpp).
PartialRunner plan_part(const TensorView& q, const KVCache& kv, const AttentionOptions& options);

// The step object's backend (CooperativeStep, step.cpp): planned at construction for q's shape
// and the cache (the parts' plans, scratch, buffers); run() takes the split of this call.
class StepBackend {
 public:
  virtual ~StepBackend() = default;
  virtual void run(const StepPlan& plan, const TensorView& q, const TensorView& out, const TensorView* lse,
                   const CooperativeNewKV* new_kv, const CooperativeOptions& options) = 0;
  CooperativeStep::Times times;  // of the last run, written by run()
};
// CooperativeOptions::refine_rates (cost_model.cpp): the rates of the streamed and CPU parts
// that `times` show for a run with `split` (the step's run number `run`, from 1) replace those
// in `rates` when either is more than 1.5x off; false (nothing changed) when they are not, for
// the step's first run (its one-off costs), or when the run does not show both (prefill, a
// forced split, a part without pages or not run).
// `source` is the rates' source before any refinement.
bool refine_cooperative_rates(CooperativeRates& rates, const std::string& source, const CooperativeSplit& split,
                              double page_bytes, const CooperativeStep::Times& times, int run);
// The CPU emulation (step_cpu.cpp) and the CUDA step (step_cuda.cu).
std::unique_ptr<StepBackend> make_step_cpu(const TensorView& q, const CooperativeKVCache& cache,
                                           const CooperativeOptions& options);
#if FASTATTN_HAVE_CUDA
std::unique_ptr<StepBackend> make_step_cuda(const TensorView& q, const CooperativeKVCache& cache,
                                            const CooperativeOptions& options);
CooperativeRates measure_rates_cuda(int ordinal, int cpu_threads);
#endif
// rates.cpp: the CPU part's decode call (1 query token, 32 over 8 KV heads, d 128, bf16, 64 MiB
// of K and 64 MiB of V in shuffled 256-token pages; kSets such sets read in turn), set up once
// (before any copy is started) and timed by rate(): K+V bytes/s of the median time per call over
// >= `calls` calls and >= `min_seconds`, after a warm-up. The CUDA rates time it while
// host-to-device copies run, the condition a step's CPU part runs in (rates_cuda.cu).
class CpuDecodeProbe {
 public:
  explicit CpuDecodeProbe(int cpu_threads);
  double rate(int calls, double min_seconds);

 private:
  static constexpr std::int64_t kSets = 4, kPages = 128, kPageSize = 256, kKvHeads = 8, kHeads = 32, kHeadDim = 128;
  int threads_;
  std::vector<std::uint16_t> k_, v_, q_, out_;
  std::vector<float> lse_;
  std::vector<std::int32_t> table_;
  std::int32_t len_ = 0;
};
// The CPU's FLOP/s on a 512-query bf16 forward call (rates.cpu_attention_flops), and a host read
// of `bytes` from `data` on `threads` threads (bytes/s).
void measure_cpu_flops(int cpu_threads, CooperativeRates& rates);
double measure_host_read(const void* data, std::size_t bytes, int threads);

}  // namespace fastattn::coop
