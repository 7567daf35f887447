// fastattn/attention.hpp — exact attention, forward and backward (FlashAttention-2).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// out = softmax(scale * q k^T + mask) v, per (batch, head).
//   q:   [batch, seqlen_q, num_heads, head_dim]      (varlen: [total_q, num_heads, head_dim])
//   k,v: [batch, seqlen_k, num_kv_heads, head_dim]   (varlen: [total_k, num_kv_heads, head_dim])
//   out: like q, same dtype
//   lse: optional, f32 [batch, num_heads, seqlen_q]  (varlen: [num_heads, total_q]);
//        natural-log log-sum-exp of the scaled (and soft-capped) scores per row.
// num_heads must be a multiple of num_kv_heads (GQA/MQA). A query row that sees no key gets
// out = 0 and lse = -inf. seqlen 0 is a valid empty call. Throws fastattn::Error; on error
// nothing is written.
KernelChoice forward(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const std::optional<TensorView>& lse = std::nullopt,
                     const AttentionOptions& options = {});

// Gradients of forward. dout, out, dq like q; dk, dv like k; lse as written by forward.
// dq, dk, dv are overwritten (not accumulated).
KernelChoice backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& out, const TensorView& lse,
                      const TensorView& dq, const TensorView& dk, const TensorView& dv,
                      const AttentionOptions& options = {});

// Validate the arguments and report the kernel a call would use, without running it.
KernelChoice plan_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out,
                          const std::optional<TensorView>& lse = std::nullopt,
                          const AttentionOptions& options = {});
KernelChoice plan_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse,
                           const TensorView& dq, const TensorView& dk, const TensorView& dv,
                           const AttentionOptions& options = {});

// Build and machine facts, for `fastattn info` and bindings.
struct BuildInfo {
  std::string version;
  bool cuda_compiled = false;
  std::vector<std::string> cpu_isas_compiled;  // kernels in this binary, e.g. {"avx2", "avx512"}
  std::string cpu_isa_selected;                // what this machine runs
  std::vector<std::string> cuda_archs_compiled;  // e.g. {"sm80", "sm90"}
  std::vector<int> cuda_head_dims;               // forward head dims with CUDA kernels
  std::vector<std::string> cuda_devices;         // "cuda:0 NVIDIA H200 (sm90, 132 SMs)"; empty without a GPU
  // Per-architecture kernel paths in this build, e.g. {"sm80", "sm75", "sm70"} (CMake
  // FASTATTN_CUDA_LOWRES_PATHS adds sm75 / sm70), and per entry of cuda_devices the path its
  // calls take: "sm80", "sm75 (forced by FASTATTN_CUDA_PATH)", or why none can run there.
  std::vector<std::string> cuda_paths_compiled;
  std::vector<std::string> cuda_device_paths;
};
BuildInfo build_info();

}  // namespace fastattn
