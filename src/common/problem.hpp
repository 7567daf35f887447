// problem.hpp — a validated attention call, normalised for the kernels.
//
// The API layer (src/api/validate.cpp) turns the caller's TensorViews and options into an
// AttentionProblem. Kernels read only this struct: every pointer is valid, every size checked,
// strides are in elements and 64-bit, the mask is resolved to a window and an alignment.
#pragma once

#include <cstdint>

#include "common/mask.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// Strides (elements) of a [batch, seqlen, heads, head_dim] tensor; head_dim stride is 1.
// In varlen mode `batch` is unused: sequence b starts at token cu_seqlens[b].
struct TokenStrides {
  std::int64_t batch = 0;
  std::int64_t token = 0;
  std::int64_t head = 0;
};

struct Operand {
  void* data = nullptr;
  TokenStrides stride;
};

struct AttentionProblem {
  DType dtype = DType::f32;  // of q, k, v, out (and dout, dq, dk, dv)
  Device device{};

  std::int64_t batch = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  // Padded batch: the sequence lengths. Varlen: the largest sequence lengths.
  std::int64_t seqlen_q = 0;
  std::int64_t seqlen_k = 0;
  std::int64_t total_q = 0;  // tokens in q: batch * seqlen_q, or cu_seqlens_q[batch]
  std::int64_t total_k = 0;

  // Varlen: host (CPU) or device (CUDA) pointers to batch + 1 cumulative offsets; else null.
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_k = nullptr;

  Operand q, k, v, out;
  // lse: f32, element (b, h, i) at lse + b * lse_batch_stride + h * lse_head_stride + i *
  // lse_token_stride (varlen: token index is global, b unused). Null when not requested.
  float* lse = nullptr;
  std::int64_t lse_batch_stride = 0;
  std::int64_t lse_head_stride = 0;
  std::int64_t lse_token_stride = 1;

  // Backward only.
  Operand dout, dq, dk, dv;

  float softmax_scale = 1.0f;
  float softcap = 0.0f;  // 0: off
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  MaskAlignment alignment = MaskAlignment::bottom_right;

  bool deterministic = false;
  int num_threads = 0;
  void* cuda_stream = nullptr;
  const Workspace* workspace = nullptr;

  bool is_varlen() const { return cu_seqlens_q != nullptr; }
  std::int64_t group_size() const { return num_heads / num_kv_heads; }  // query heads per KV head

  // Host-side sequence geometry (CPU pointers only).
  std::int64_t q_start(std::int64_t b) const { return is_varlen() ? cu_seqlens_q[b] : 0; }
  std::int64_t k_start(std::int64_t b) const { return is_varlen() ? cu_seqlens_k[b] : 0; }
  std::int64_t q_len(std::int64_t b) const {
    return is_varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q;
  }
  std::int64_t k_len(std::int64_t b) const {
    return is_varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqlen_k;
  }
  SequenceMask mask_for(std::int64_t len_q, std::int64_t len_k) const {
    SequenceMask m;
    m.left = window_left;
    m.right = window_right;
    m.offset = alignment == MaskAlignment::bottom_right ? len_k - len_q : 0;
    m.seqlen_k = len_k;
    return m;
  }

  // Element offset of (sequence b, token t within it, head h) in an operand.
  std::int64_t offset_q(const Operand& op, std::int64_t b, std::int64_t t, std::int64_t h) const {
    return (is_varlen() ? (q_start(b) + t) * op.stride.token
                        : b * op.stride.batch + t * op.stride.token) +
           h * op.stride.head;
  }
  std::int64_t offset_k(const Operand& op, std::int64_t b, std::int64_t t, std::int64_t h) const {
    return (is_varlen() ? (k_start(b) + t) * op.stride.token
                        : b * op.stride.batch + t * op.stride.token) +
           h * op.stride.head;
  }
  float* lse_row(std::int64_t b, std::int64_t h) const {  // lse of (b, h, token 0)
    return lse + (is_varlen() ? q_start(b) * lse_token_stride : b * lse_batch_stride) +
           h * lse_head_stride;
  }
};

// FLOPs of the matrix products, counting only visible (query, key) pairs is the kernels'
// business; benchmarks use the flash-attn convention: forward 4 * sq * sk * d per (b, h),
// halved for causal; backward 2.5x forward.

}  // namespace fastattn
