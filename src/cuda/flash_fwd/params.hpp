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
};

}  // namespace fastattn::cuda
