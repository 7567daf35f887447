// fastattn/kv_cache.hpp — attention over a KV cache (decode, speculative decode, chunked
// prefill): contiguous or paged cache, optional in-place append, and a plan/run pair whose run
// can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// A KV cache the caller owns. Two layouts, told apart by block_table:
//   contiguous: k, v [batch, capacity, num_kv_heads, head_dim]; block_table absent
//   paged:      k, v [num_pages, page_size, num_kv_heads, head_dim];
//               block_table int32 [batch, max_pages_per_seq]: page p of sequence b is
//               k[block_table[b][p]]; any page_size >= 1
// seqlens: int32 [batch], the tokens already in the cache per sequence (before this call's
// append). fastattn never changes seqlens: after an append the caller advances them
// (flash_attn_with_kvcache's convention). head_dim contiguous; other strides free.
struct KVCache {
  TensorView k;
  TensorView v;
  TensorView seqlens;
  std::optional<TensorView> block_table;

  bool is_paged() const { return block_table.has_value(); }
};

// New keys and values to append before attending: [batch, seqlen_new, num_kv_heads, head_dim],
// written at token seqlens[b] .. seqlens[b] + seqlen_new - 1 of sequence b.
struct KVAppend {
  TensorView k;
  TensorView v;
};

// out = attention(q, keys 0 .. seqlens[b] + seqlen_new - 1 of sequence b), per (batch, head).
//   q, out: [batch, seqlen_q, num_heads, head_dim]; lse: optional f32 [batch, num_heads, seqlen_q]
// The causal mask and the sliding window are aligned to the end of the cache (bottom_right):
// query i sees key j when j <= cache_len - seqlen_q + i (causal). options.alignment must be
// bottom_right; varlen options (cu_seqlens_*) must be absent. GQA/MQA, softcap, softmax_scale
// as in forward(). A sequence with no keys gives out 0 and lse -inf.
// The append happens even when seqlen_q is 0 (a call that only fills the cache); batch 0 and
// seqlen_q 0 are valid empty calls otherwise.
// Errors (fastattn::Error naming the argument; nothing written, the cache included): shapes,
// dtypes or devices that disagree; k and v caches of different shapes; a block table entry
// outside [0, num_pages) among the pages a sequence uses (slot p < ceil((seqlens[b] +
// seqlen_new) / page_size); the other slots are never read, so they may hold anything, e.g. -1);
// seqlens[b] < 0 or beyond the capacity (contiguous: capacity; paged: max_pages_per_seq *
// page_size); an append that would overflow it (seqlens[b] + seqlen_new > capacity). On CUDA
// those value checks read seqlens and block_table back to the host, which synchronises:
// KVCachePlan::run skips them (see there).
// An eager call is KVCachePlan(kv_cache_shape(...) with max_cache_len = its longest cache,
// options).run(...): the two give bitwise equal results.
KernelChoice attention_with_kv_cache(const TensorView& q, const KVCache& cache, const TensorView& out,
                                     const std::optional<TensorView>& lse = std::nullopt,
                                     const std::optional<KVAppend>& append = std::nullopt,
                                     const AttentionOptions& options = {});

// The shape a plan serves; every call of its run must match it (kv_cache_shape below builds it
// from a call's tensors).
struct KVCacheShape {
  DType dtype = DType::bf16;
  Device device{};
  std::int64_t batch = 0;
  std::int64_t seqlen_q = 1;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t seqlen_new = 0;  // tokens appended per call (0: no append)
  bool paged = false;
  std::int64_t page_size = 0;          // paged: tokens per page
  std::int64_t num_pages = 0;          // paged: pages in k / v
  std::int64_t max_pages_per_seq = 0;  // paged: block_table's second dimension
  std::int64_t capacity = 0;           // contiguous: tokens per sequence in k / v
  // The longest cache (seqlens[b] + seqlen_new) the plan will see; sizes the split-KV count.
  // 0: the capacity. Longer caches still run correctly, with fewer splits than ideal.
  std::int64_t max_cache_len = 0;
  bool with_lse = false;
};

// The shape of a call (max_cache_len 0), with the structural checks of attention_with_kv_cache
// (Error naming the argument); values in seqlens / block_table are not read.
KVCacheShape kv_cache_shape(const TensorView& q, const KVCache& cache,
                            const std::optional<TensorView>& lse = std::nullopt,
                            const std::optional<KVAppend>& append = std::nullopt);

// Plan once per batch shape on the host (split counts, grid, kernels and their CUDA attributes,
// scratch: allocated here, owned by the plan), then run many times. run() makes no allocation, no synchronisation and no decision
// that depends on seqlens or block_table values: on CUDA it can be captured in a CUDA graph and
// replayed while seqlens and the block table change on the device, bitwise equal to eager
// calls with the same plan. run() checks the views against the shape (cheap host checks) but
// not the values in seqlens / block_table: out-of-range values there are the caller's bug; the
// kernels clamp them so nothing outside the cache is read or written.
// The scratch is the plan's: one run at a time per plan (on CUDA: runs ordered on a stream).
// CUDA: options.workspace, when given, is that scratch for the life of the plan (it must hold
// choice().workspace_bytes from a 256-byte aligned address); else the plan cudaMallocs it.
// On the CPU, shapes beyond the decode kernel's range (seqlen_q > 16, chunked prefill) gather
// each sequence's visible pages into the plan's host scratch (sized for the capacity) and run
// the prefill kernel, whose own tile scratch comes from fastattn's cached host pools.
class KVCachePlan {
 public:
  KVCachePlan(const KVCacheShape& shape, const AttentionOptions& options = {});
  ~KVCachePlan();
  KVCachePlan(KVCachePlan&&) noexcept;
  KVCachePlan& operator=(KVCachePlan&&) noexcept;

  // On options.cuda_stream (the plan's). Returns choice() (a reference: a run copies no
  // string; its host work is the view checks and the launches, no allocation).
  const KernelChoice& run(const TensorView& q, const KVCache& cache, const TensorView& out,
                          const std::optional<TensorView>& lse = std::nullopt,
                          const std::optional<KVAppend>& append = std::nullopt) const;
  // On `cuda_stream` (a cudaStream_t; nullptr: the default stream), e.g. the stream a CUDA
  // graph is captured on. CPU plans ignore it.
  const KernelChoice& run(const TensorView& q, const KVCache& cache, const TensorView& out,
                          const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                          void* cuda_stream) const;

  const KVCacheShape& shape() const;
  const KernelChoice& choice() const;  // what run() launches, and why

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fastattn
