// fastattn/cooperative.hpp — contexts beyond device memory: a KV cache whose pages live partly
// in device memory (up to a budget) and partly in pinned host memory, and an exact attention
// step split three ways between the GPU over device pages, the GPU over host pages streamed
// over PCIe, and the CPU over host pages, merged by log-sum-exp (docs/long-context.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fastattn/error.hpp"
#include "fastattn/kv_cache.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// ---- the cache -------------------------------------------------------------------------------

// Where a cache page lives.
enum class PageTier { device, host };
const char* to_string(PageTier tier) noexcept;

struct CooperativeCacheConfig {
  DType dtype = DType::bf16;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t page_size = 256;  // tokens per page
  std::int64_t max_sequences = 1;
  // Device memory for the cache's device pages AND the step's staging buffers (memory-capped
  // mode's limit for this cache): device pages = (budget - staging) / page_bytes, rounded down.
  std::size_t device_budget_bytes = 0;
  // Pages of each of the two staging buffers host pages are streamed through (0: the default,
  // enough pages for 32 MiB of K+V). Counted in the budget: 2 x staging_pages x page_bytes.
  std::int64_t staging_pages = 0;
  std::int64_t host_pages = 0;  // pages in pinned host memory
  // cuda(i): device pages on GPU i, host pages pinned (cudaHostAlloc). cpu(): the "device" tier
  // is ordinary host memory too and every part runs on the CPU (the emulation the CPU tests use;
  // the same bookkeeping, split and merge order as on a GPU).
  Device device = Device::cpu();
};

// One page table per sequence over two page pools. Page ids are global: [0, device_pages) are
// device pages, [device_pages, device_pages + host_pages) host pages. append() allocates pages
// as a sequence grows, device pages first while any is free, then host pages, so a growing
// context crosses the device/host boundary once. Pages may be shared (set_pages with a page
// another sequence holds, e.g. a common prompt); a page is free again when no sequence holds it.
// Errors (fastattn::Error naming the argument, nothing written, bookkeeping unchanged): a
// sequence id outside [0, max_sequences); a full cache (no free page for an append); page ids
// outside the pools or repeated; lengths beyond the pages given; shapes / dtypes that disagree.
// Not thread-safe: one caller at a time (a step only reads).
class CooperativeKVCache {
 public:
  explicit CooperativeKVCache(const CooperativeCacheConfig& config);
  ~CooperativeKVCache();
  CooperativeKVCache(CooperativeKVCache&&) noexcept;
  CooperativeKVCache& operator=(CooperativeKVCache&&) noexcept;

  // k, v: [seqlen_new, num_kv_heads, head_dim] or [1, seqlen_new, num_kv_heads, head_dim], the
  // cache's dtype, on the CPU or on the cache's device; appended at the sequence's end.
  void append(std::int64_t seq, const TensorView& k, const TensorView& v);
  // Throws what append would for `tokens` more tokens of `seq` that do not fit (Error
  // out_of_memory naming `name`), and a bad sequence id; writes nothing.
  void check_room(std::int64_t seq, std::int64_t tokens, const std::string& name) const;
  // The caller's page table for `seq` (global ids, in token order) holding `length` tokens.
  void set_pages(std::int64_t seq, const std::vector<std::int32_t>& pages, std::int64_t length);
  void release(std::int64_t seq);  // frees the pages no other sequence holds; length 0

  std::int64_t length(std::int64_t seq) const;
  const std::vector<std::int32_t>& pages(std::int64_t seq) const;
  PageTier tier(std::int32_t page) const;
  std::int64_t device_pages() const;
  std::int64_t host_pages() const;
  std::int64_t free_pages(PageTier tier) const;
  std::size_t page_bytes() const;  // K + V of one page
  std::size_t staging_bytes() const;  // both staging buffers, K + V
  std::size_t device_bytes() const;   // device pages + staging: what the cache holds on the device
  const CooperativeCacheConfig& config() const;

  // The pools as paged views: k, v [pages, page_size, num_kv_heads, head_dim] (device pool on
  // the cache's device; host pool on the CPU, pinned when the device is CUDA).
  TensorView pool_k(PageTier tier) const;
  TensorView pool_v(PageTier tier) const;
  // The staging buffers: contiguous K or V of staging_pages pages, [tokens, num_kv_heads, head_dim].
  TensorView staging(int buffer, bool value) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// ---- the split and its cost model ------------------------------------------------------------

// Rates measured once per process (measure_cooperative_rates), or given by a caller or a test.
// All in bytes of K+V (or copied bytes) per second.
struct CooperativeRates {
  double pcie_h2d = 0;          // pinned host -> device copy
  double host_read_during_dma = 0;  // CPU threads reading host memory while that copy runs
  double cpu_attention = 0;     // the CPU decode kernel over host pages, K+V bytes per second
  double gpu_hbm = 0;           // the GPU KV-cache kernel over device pages (device copy as a proxy)
  double gpu_attention_flops = 0;  // FLOP/s of GPU attention (prefill's compute bound)
  double cpu_attention_flops = 0;  // FLOP/s of CPU attention with many query rows
  std::string source;           // "measured ...", "given", "FASTATTN_COOP_RATES=..."
};

// Measures the rates once per process (later calls return the first result): a pinned copy of
// 256 MiB, host reads on `cpu_threads` threads while a copy runs, the CPU decode kernel over
// 64 MiB of pages, a device-to-device copy. Without a GPU the GPU rates are 0. The environment
// variable FASTATTN_COOP_RATES="pcie=50e9,host=80e9,cpu=60e9,hbm=4e12,flops=4e14,cpuflops=1e12"
// replaces the
// measurement (for reproducible runs and tests); parse_cooperative_rates reads that text.
CooperativeRates measure_cooperative_rates(Device device, int cpu_threads = 0);
CooperativeRates parse_cooperative_rates(const std::string& text);

// How the step's GPU parts attend their pages, chosen from seqlen_q alone (cooperative_gpu_kernel):
//   kv_cache  decode and short queries (seqlen_q <= kCooperativeDecodeMaxQueries): the KV-cache
//             kernel over the device pages' block table and over each staged chunk, f32 partials;
//   forward   prefill (longer queries): the forward kernel (fastattn::forward; on Hopper its sm90
//             path) over each run of consecutive device pages, read in place as contiguous K/V,
//             and over each staged chunk; partials in q's dtype with f32 lse, merged in f32.
// The threshold is the decode kernels' (CUDA kDecodeMaxSeqlenQ, CPU kDecodeMaxQueries): beyond
// it the KV-cache call itself switches to a prefill route, and the forward kernel's tiles fill.
enum class CooperativeKernel { kv_cache, forward };
const char* to_string(CooperativeKernel kernel) noexcept;
inline constexpr std::int64_t kCooperativeDecodeMaxQueries = 16;
CooperativeKernel cooperative_gpu_kernel(std::int64_t seqlen_q) noexcept;

// What the three parts get, in pages of the sequence, and why.
struct CooperativeSplit {
  std::int64_t device_pages = 0;    // part 1: GPU over device-resident pages
  std::int64_t streamed_pages = 0;  // part 2: host pages copied to the staging buffers
  std::int64_t cpu_pages = 0;       // part 3: host pages attended by the CPU
  std::int64_t chunk_pages = 0;     // pages per staging chunk
  CooperativeKernel gpu_kernel = CooperativeKernel::kv_cache;  // what parts 1 and 2 run
  // Model times, seconds: each part alone, and the step (the slowest part + the merge).
  double device_s = 0, streamed_s = 0, cpu_s = 0, step_s = 0;
  KernelChoice choice;  // kernel "cooperative.<backend>", reason: the split and why
};

// Which split a step uses. automatic: the cost model. The rest are the comparison strategies of
// the benchmark (and forced splits for tests): all host pages streamed, or all on the CPU, or a
// given fraction of the host pages streamed.
enum class SplitPolicy { automatic, stream_all, cpu_all, stream_fraction };

struct CooperativeOptions {
  AttentionOptions attention;   // softmax_scale, softcap, causal (for the new tokens), cuda_stream
  SplitPolicy policy = SplitPolicy::automatic;
  double stream_fraction = 0.5;  // SplitPolicy::stream_fraction
  int cpu_threads = 0;           // threads of the CPU part; 0: OpenMP's default
  std::optional<CooperativeRates> rates;  // absent: measure_cooperative_rates
  // A CooperativeStep checks the rates it started from (measured or given) against its own runs:
  // when a decode run of the automatic policy (from the step's second run: the first pays one-off
  // costs), with pages in both host parts, shows the streamed part's rate (pcie_h2d) or the CPU
  // part's read rate more than 1.5x off the rate in use, both are replaced by what that run
  // showed. A part the start rates leave without pages is not observed, so not corrected. A measurement at start can be disturbed by something
  // else on the host (it once read a 7x low CPU rate, and the steps ran 1.8x longer); smaller
  // differences are run-to-run noise and are left alone (docs/long-context.md, "The cost
  // model"). Off: the split is a function of the start rates alone (as for one-shot
  // cooperative_attention calls, which never refine).
  bool refine_rates = true;
  // Which parts run (bits: 1 device, 2 streamed, 4 CPU); the benchmark times each part alone
  // with the split of a full step. A part that does not run contributes nothing (the result is
  // then attention over the other parts' keys only).
  unsigned parts = 7;
};

// The one chooser: the split of a step over `host_pages` host pages and `device_pages` device
// pages of a sequence, for `seqlen_q` query tokens of `num_heads` heads. Pure arithmetic (no
// device access): the tests check its choices for given rates.
//   part times: device   = max(device bytes / gpu_hbm, device FLOPs / gpu_attention_flops)
//               streamed = max(streamed bytes / pcie_h2d, streamed FLOPs / gpu_attention_flops)
//               cpu      = max(cpu bytes / min(cpu_attention, host_read_during_dma),
//                              cpu FLOPs / cpu_attention_flops)
//   the host pages are split so that streamed and cpu finish together (the best a linear model
//   can do), rounded to whole pages; a part below one page's worth of work is dropped. With
//   the forward kernel (prefill) the CPU's share is rounded down, so the CPU part is never the
//   slowest: a CPU page then costs hundreds of GPU pages.
CooperativeSplit choose_cooperative_split(std::int64_t device_pages, std::int64_t host_pages,
                                          std::int64_t page_size, std::int64_t num_kv_heads,
                                          std::int64_t head_dim, DType dtype, std::int64_t seqlen_q,
                                          std::int64_t num_heads, std::int64_t staging_pages,
                                          const CooperativeRates& rates,
                                          const CooperativeOptions& options);

// ---- the step --------------------------------------------------------------------------------

// New tokens of this step attended besides the cache (chunked prefill's own chunk, or a decode
// token not yet appended): [1, seqlen_new, num_kv_heads, head_dim] on q's device. They are not
// appended: call cache.append afterwards.
struct CooperativeNewKV {
  TensorView k;
  TensorView v;
};

// out = attention(q, the `length(seq)` cached tokens of sequence `seq` (all visible) followed by
// the new tokens, if any (causal among themselves, bottom-right, when options.attention.causal)).
//   q, out: [1, seqlen_q, num_heads, head_dim], the cache's dtype, on the cache's device (CUDA)
//   or the CPU (emulation); lse: optional f32 [1, num_heads, seqlen_q].
// The parts run at once: part 1 and part 2 on the GPU (part 2's copies on a stream of their own,
// the copy of chunk i+1 overlapping the attention of chunk i, through two staging buffers),
// part 3 on host threads; each partial (out, lse; f32, unrounded) is merged into an f32 accumulator with
// merge_states' formula, then rounded once to out. Returns when out is written (it synchronises
// the stream). Windows are not supported (Error unsupported); everything else as
// attention_with_kv_cache. One call is CooperativeStep(q, cache, options).run(q, seq, ...): it
// plans and allocates per call; a decode loop keeps a CooperativeStep.
KernelChoice cooperative_attention(const TensorView& q, const CooperativeKVCache& cache,
                                   std::int64_t seq, const TensorView& out,
                                   const std::optional<TensorView>& lse = std::nullopt,
                                   const std::optional<CooperativeNewKV>& new_kv = std::nullopt,
                                   const CooperativeOptions& options = {});

// The step planned once and run many times (a decode loop; docs/long-context.md). The
// constructor checks q (its shape, [1, seqlen_q, num_heads, head_dim], is the step's), takes the
// rates (options.rates, or measure_cooperative_rates once per process), and plans the parts'
// kernels for the cache's pools (split counts sized for a whole pool, so the plans hold however
// the sequence grows or the split moves), and allocates everything a run uses: the parts' kernel
// scratch, the f32 accumulator and partials, the block tables and lengths (on CUDA: device memory
// plus pinned staging), the copy stream and its events. run() chooses the split for `seq` as
// it is now (the cost model: host arithmetic) and runs it with no device or pinned allocation and
// no plan; on CUDA it synchronises the stream twice (q copied to the host for the CPU part, and
// the end of the step: out is written when it returns). The cache must outlive the step.
// One run at a time per step. Errors as cooperative_attention; a q of another shape than the
// step's: Error naming q.
class CooperativeStep {
 public:
  CooperativeStep(const TensorView& q, const CooperativeKVCache& cache, const CooperativeOptions& options = {});
  ~CooperativeStep();
  CooperativeStep(CooperativeStep&&) noexcept;
  CooperativeStep& operator=(CooperativeStep&&) noexcept;

  KernelChoice run(const TensorView& q, std::int64_t seq, const TensorView& out,
                   const std::optional<TensorView>& lse = std::nullopt,
                   const std::optional<CooperativeNewKV>& new_kv = std::nullopt);
  // The split run() would use for `seq` now, without running it.
  CooperativeSplit plan(std::int64_t seq) const;
  // The rates the next run's split comes from (options.refine_rates: a run's own when the start
  // rates were off).
  const CooperativeRates& rates() const;
  // What the last run() took, measured (seconds; 0 before any run and for parts that did not
  // run): gpu_s, parts 1 and 2 on the stream (CUDA events from the run's start to the end of the
  // last streamed chunk's attention); cpu_s, part 3 (its host thread, from the same start);
  // step_s, the whole run (host clock). On CUDA the parts overlap, so gpu_s and cpu_s against
  // the split's model times (device_s + streamed_s, cpu_s) show what running together cost; the
  // CPU emulation runs them one after the other.
  struct Times {
    double gpu_s = 0, cpu_s = 0, step_s = 0;
  };
  Times last_times() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The KV-cache attention call (kv_cache.hpp) over a cooperative cache, for sequence `seq`:
// attention_with_kv_cache's semantics with batch 1. q, out: [1, seqlen_q, num_heads, head_dim];
// `append` (optional, [1, seqlen_new, num_kv_heads, head_dim]) holds new tokens: they are
// attended as the sequence's newest keys (causal among themselves when options.attention.causal,
// aligned to the end of the cache) and then appended to the sequence. The cache must have room
// for them (checked first: an Error naming `append`, nothing written); nothing is appended when
// the attention fails. Errors otherwise as cooperative_attention.
KernelChoice attention_with_kv_cache(const TensorView& q, CooperativeKVCache& cache, std::int64_t seq,
                                     const TensorView& out, const std::optional<TensorView>& lse = std::nullopt,
                                     const std::optional<KVAppend>& append = std::nullopt,
                                     const CooperativeOptions& options = {});

// The split cooperative_attention would use, without running it.
CooperativeSplit plan_cooperative_attention(const TensorView& q, const CooperativeKVCache& cache,
                                            std::int64_t seq, const CooperativeOptions& options = {});

}  // namespace fastattn
