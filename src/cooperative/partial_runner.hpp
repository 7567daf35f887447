// partial_runner.hpp — one part of the cooperative step: a KV-cache attention planned once
// (route, split counts, scratch, as KVCachePlan does) whose run writes the part's partial result
// UNROUNDED: out in f32 (and lse f32) for bf16 / f16 q, so the step rounds once, after the merge
// (issue 18's exactness bar: no larger error than one single-device call). The f32 output is
// KVCacheProblem::out_f32, honoured by the KV-cache decode kernels (the CPU decode kernel's
// merge pass, the CUDA KV-cache kernel's epilogue and combine). Routes without it (the CPU's
// chunked-prefill gather route, seqlen_q > 16; the float64 reference) run a KVCachePlan and write
// out in q's dtype: out_dtype() says which.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>

#include "api/kv_cache_route.hpp"
#include "fastattn/kv_cache.hpp"

namespace fastattn::coop {

class PartialRunner {
 public:
  PartialRunner();  // unplanned (planned() false)
  // Plans for `shape` (its max_cache_len sizes the split counts) and allocates the scratch.
  PartialRunner(const KVCacheShape& shape, const AttentionOptions& options);
  ~PartialRunner();
  PartialRunner(PartialRunner&&) noexcept;
  PartialRunner& operator=(PartialRunner&&) noexcept;

  // out: dense [1, seqlen_q, num_heads, head_dim] of out_dtype() on the shape's device;
  // lse: f32 [1, num_heads, seqlen_q]. No allocation, no synchronisation; on `cuda_stream`.
  void run(const TensorView& q, const KVCache& cache, void* out, float* lse, void* cuda_stream) const;

  DType out_dtype() const;
  const KernelChoice& choice() const;
  bool planned() const { return impl_ != nullptr; }

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fastattn::coop
