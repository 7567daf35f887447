// kv_cache_forward.hpp — forward()'s short-query calls on the KV-cache kernel (plain C++, no
// CUDA headers): a padded (not varlen) call's K/V are a contiguous cache with one page per
// sequence, every sequence full (seqlens null: seqlen_k keys each), nothing appended. The
// router is flash_fwd/heuristics.hpp (forward_uses_kv_cache_kernel), the plan and the run
// cuda_backend.cu's forward_plan / forward.
#pragma once

#include "common/problem.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn::cuda {

// p's q, k, v, out, lse, mask and stream as a KVCacheProblem: page stride = k / v's batch
// stride, page_size = seqlen_k, num_pages = batch, block_table and seqlens null.
KVCacheProblem kv_cache_view_of_forward(const AttentionProblem& p);

}  // namespace fastattn::cuda
