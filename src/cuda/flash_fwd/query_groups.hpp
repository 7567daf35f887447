// query_groups.hpp — GQA decode: the query heads that share a KV head become the query rows of
// one problem, so each K/V byte is read once per KV head instead of once per query head.
//
// A decode step (seqlen_q = 1) with group_size query heads per KV head is, per (batch, KV head),
// group_size independent one-row attentions over the same keys. When that one row sees every key
// (no window or causal limit cuts into the keys: the usual bottom-right-aligned causal decode),
// they are one attention with group_size query rows and no mask:
//   q   [batch, 1, num_kv_heads * group, d]  ->  [batch, group, num_kv_heads, d]
//       (token stride = the old head stride, head stride = group * the old head stride)
//   out likewise; lse [batch, num_heads, 1] -> [batch, num_kv_heads, group] (same memory)
// Only strides change: no copy. flash-attn does the same ("seqlenq_ngroups_swapped",
// csrc/flash_attn/flash_api.cpp); FlashInfer packs the group into its decode tile.
// Host-only, so the CPU tests check the rewrite (tests/cuda_forward_plan_test.cpp).
#pragma once

#include <cstdint>

#include "common/problem.hpp"

namespace fastattn::cuda {

// Whether the one query row of a seqlen_q = 1 call sees every key, so the rows of a packed
// group need no mask.
inline bool single_row_sees_all_keys(const AttentionProblem& p) {
  const std::int64_t offset = p.alignment == MaskAlignment::bottom_right ? p.seqlen_k - 1 : 0;
  const bool left_open = p.window_left < 0 || offset - p.window_left <= 0;
  const bool right_open = p.window_right < 0 || offset + p.window_right >= p.seqlen_k - 1;
  return left_open && right_open;
}

// The query heads per KV head packed as rows, when that computes the same attention; 1 when the
// call is left as it is.
inline std::int64_t packed_query_group(const AttentionProblem& p) {
  if (p.is_varlen() || p.seqlen_q != 1 || p.seqlen_k < 1 || p.num_kv_heads <= 0) return 1;
  const std::int64_t group = p.group_size();
  if (group <= 1 || !single_row_sees_all_keys(p)) return 1;
  return group;
}

// The problem the kernels run: p itself, or its packed form (see the head comment).
inline AttentionProblem with_packed_query_groups(const AttentionProblem& p) {
  const std::int64_t group = packed_query_group(p);
  if (group == 1) return p;
  AttentionProblem packed = p;
  packed.num_heads = p.num_kv_heads;
  packed.seqlen_q = group;
  packed.total_q = p.batch * group;
  packed.window_left = -1;
  packed.window_right = -1;
  for (Operand* rows : {&packed.q, &packed.out}) {
    rows->stride.token = rows->stride.head;
    rows->stride.head *= group;
  }
  packed.lse_token_stride = p.lse_head_stride;
  packed.lse_head_stride = p.lse_head_stride * group;
  return packed;
}

}  // namespace fastattn::cuda
