// split_layout.hpp — where split-KV partials live in the scratch (no CUDA headers: the
// dispatcher sizes the workspace with split_workspace_bytes).
//
//   oaccum:   (num_splits, num_heads, total_q, head_dim) f32, head_dim contiguous
//   lseaccum: (num_splits, num_heads, total_q) f32
//
// total_q is batch * seqlen_q for padded batches (token t of sequence b is row b * seqlen_q + t)
// and the varlen token count (token t of sequence b is row cu_seqlens_q[b] + t). The combine
// kernel gives one warp to one (head, token) row and reads, per split, one contiguous row of
// head_dim floats (512 B at d = 128): coalesced, and the splits of a row are independent loads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common/scratch_align.hpp"

#if defined(__CUDACC__)
#define FASTATTN_SPLIT_HD __host__ __device__ __forceinline__
#else
#define FASTATTN_SPLIT_HD inline
#endif

namespace fastattn::cuda {

// Row index of (split, head, token row) in lseaccum; oaccum's row starts at row * head_dim.
// 64-bit: num_splits * num_heads * total_q reaches past 2^31 for long varlen batches.
FASTATTN_SPLIT_HD std::int64_t split_row(int split, int head, std::int64_t token_row, int num_heads,
                                         std::int64_t total_q) {
  return (static_cast<std::int64_t>(split) * num_heads + head) * total_q + token_row;
}

// Byte offset of lseaccum inside the scratch (oaccum starts at 0).
inline std::size_t split_lse_offset(int num_splits, std::int64_t num_heads, std::int64_t total_q,
                                    std::int64_t head_dim) {
  return scratch_align(static_cast<std::size_t>(num_splits) * static_cast<std::size_t>(num_heads) *
                     static_cast<std::size_t>(total_q) * static_cast<std::size_t>(head_dim) * sizeof(float));
}

// Scratch bytes of a split-KV call (0 without splits).
inline std::size_t split_workspace_bytes(int num_splits, std::int64_t num_heads, std::int64_t total_q,
                                         std::int64_t head_dim) {
  if (num_splits <= 1) return 0;
  return split_lse_offset(num_splits, num_heads, total_q, head_dim) +
         scratch_align(static_cast<std::size_t>(num_splits) * static_cast<std::size_t>(num_heads) *
                     static_cast<std::size_t>(total_q) * sizeof(float));
}

}  // namespace fastattn::cuda
