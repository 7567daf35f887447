// kv_cache_bench.hpp — attention over a KV cache, timed: `fastattn bench --kv-cache`.
//
// The decode step of an inference engine: a KVCachePlan made once for the shape (its key splits
// sized for seqlen_k), then KVCachePlan::run timed, each sequence's cache holding seqlen_k tokens.
// The cache is contiguous [batch, seqlen_k, kv_heads, head_dim] (shape.kv_page_size 0), or paged
// [num_pages, page_size, kv_heads, head_dim] with the pages of all sequences in a shuffled order
// (what a serving engine's allocator leaves after a while), so K/V reads jump between pages.
#pragma once

#include <cstdint>

#include "attention_bench.hpp"

namespace fastattn::perf {

BenchResult run_kv_cache_bench(const BenchShape& shape, Backend backend, int threads, const TimingOptions& timing,
                               std::uint64_t seed = 1);

}  // namespace fastattn::perf
