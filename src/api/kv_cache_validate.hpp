// kv_cache_validate.hpp — a KV-cache call's arguments -> KVCacheProblem, or an Error naming the
// argument (fastattn/kv_cache.hpp); the checks a plan's run repeats; the shape of a call.
#pragma once

#include <cstdint>
#include <optional>

#include "fastattn/kv_cache.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn {

// Every structural check (ranks, shapes, dtypes, devices, strides, overlaps, options); reads no
// tensor memory, so it serves CUDA tensors and a plan's run alike.
KVCacheProblem validate_kv_cache(const TensorView& q, const KVCache& cache, const TensorView& out,
                                 const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                                 const AttentionOptions& options);

// The same checks without an output (kv_cache_shape): nothing the call would write is known.
KVCacheProblem validate_kv_cache_structure(const TensorView& q, const KVCache& cache,
                                           const std::optional<TensorView>& lse,
                                           const std::optional<KVAppend>& append);

// The value checks, on host copies of cache.seqlens (batch entries) and cache.block_table
// (batch rows of bt_row_stride elements; null for a contiguous cache): seqlens in [0,
// capacity], seqlens + seqlen_new <= capacity (the append fits), the block-table entries of
// the pages each sequence uses in [0, num_pages). Returns the longest cache, max over b of
// seqlens[b] + seqlen_new (0 for batch 0).
std::int64_t check_kv_cache_values(const KVCacheProblem& p, const std::int32_t* seqlens,
                                   const std::int32_t* block_table, std::int64_t bt_row_stride);

// The shape of a validated call (max_cache_len 0).
KVCacheShape kv_cache_shape_of(const KVCacheProblem& p);

// A plan's shape: its fields checked (Error naming shape.<field>), options as for a call.
void check_kv_cache_shape(const KVCacheShape& shape, const AttentionOptions& options);
// The problem a shape stands for, with null data pointers and dense strides: what the
// planners (CPU decode plan, cuda::kv_cache_plan) read, which is shapes only.
KVCacheProblem kv_cache_problem_of(const KVCacheShape& shape, const AttentionOptions& options);

// A run's call against its plan: Error naming the first argument whose shape, dtype or device
// differs from the plan's (e.g. "cache.k: expected num_pages (shape[0]) = 64 (the plan's),
// got 80").
void check_matches_plan(const KVCacheShape& plan, const KVCacheShape& call);

}  // namespace fastattn
