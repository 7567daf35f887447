// params.hpp — what the forward kernels read: plain values, built on the host from an
// AttentionProblem (cuda_backend.cu). 64-bit strides and offsets throughout.
#pragma once

#include <cstdint>

namespace fastattn::cuda {

struct ForwardParams {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* lse;  // null when not requested

  // Element strides; in varlen mode batch strides are unused (cu_seqlens give token offsets).
  int64_t q_batch_stride, q_token_stride, q_head_stride;
  int64_t k_batch_stride, k_token_stride, k_head_stride;
  int64_t v_batch_stride, v_token_stride, v_head_stride;
  int64_t o_batch_stride, o_token_stride, o_head_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_token_stride;

  const int32_t* cu_seqlens_q;  // device pointers, or null for padded batches
  const int32_t* cu_seqlens_k;

  int batch;
  int num_heads;
  int group_size;  // query heads per KV head
  int seqlen_q;    // padded: the length; varlen: the longest
  int seqlen_k;

  float scale_log2;  // softmax scale * log2(e); with softcap: log2(e)
  float softcap;     // 0: off; else scores are softcap * tanh(scale * qk / softcap)
  float softcap_pre_scale;  // scale / softcap
  int64_t window_left;
  int64_t window_right;
  bool bottom_right;

  // Launch plan (heuristics.hpp): which kernel, and the split-KV scratch.
  bool short_query;  // the 16-row kernel (kernel_decode.cuh) instead of the main one
  int num_splits;    // 1: no split; else each CTA covers 1/num_splits of its key tiles
  int64_t total_q;   // rows per head in the scratch: batch * seqlen_q, or varlen total tokens
  int64_t total_k;   // key tokens: batch * seqlen_k, or varlen k.shape[0] (sm90 tensor maps)
  // Split-KV partials (split_layout.hpp), written by the forward, read by the combine kernel:
  //   oaccum:   (num_splits, num_heads, total_q, head_dim) f32, O of each split normalised by
  //             its own row sum
  //   lseaccum: (num_splits, num_heads, total_q) f32, natural-log lse of each split (-inf: the
  //             split saw no key of that row)
  float* oaccum;
  float* lseaccum;
};

}  // namespace fastattn::cuda
