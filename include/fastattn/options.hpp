// fastattn/options.hpp — what a caller can ask of an attention call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "fastattn/tensor.hpp"

namespace fastattn {

// Where the causal diagonal and the sliding window sit when seqlen_q != seqlen_k.
//   bottom_right: query i lines up with key i + (seqlen_k - seqlen_q)  (flash-attn >= 2.1, default)
//   top_left:     query i lines up with key i
enum class MaskAlignment { bottom_right, top_left };

enum class Backend {
  automatic,  // the best backend for the tensors' device
  cpu,        // FlashAttention-2 on the CPU (SIMD, threads)
  reference,  // float64, materialises the score matrix; for tests and `fastattn check`
  cuda,       // FlashAttention-2 on NVIDIA GPUs
};

const char* to_string(Backend backend) noexcept;

// Memory the caller lends for scratch. When absent, fastattn uses an internal cached pool.
struct Workspace {
  void* data = nullptr;
  std::size_t size = 0;  // bytes
};

struct AttentionOptions {
  // Softmax scale; default 1/sqrt(head_dim).
  std::optional<float> softmax_scale;

  // Masks. Key j is visible to query i when, with d = i + offset (offset = seqlen_k - seqlen_q
  // for bottom_right, 0 for top_left):
  //   (window_left < 0 || j >= d - window_left) && (window_right < 0 || j <= d + window_right)
  // `causal` is the window (window_left, 0); with causal, window_right must be -1 or 0.
  bool causal = false;
  std::int64_t window_left = -1;   // -1: unbounded
  std::int64_t window_right = -1;  // -1: unbounded
  MaskAlignment alignment = MaskAlignment::bottom_right;

  // Logit soft-cap: scores become softcap * tanh(scale * q.k / softcap). 0 disables it.
  float softcap = 0.0f;

  // Variable-length batches: int32 tensors of shape [batch + 1] with cumulative token offsets
  // into q (and out, dq) and into k, v (and dk, dv); q, k, v are then [total, heads, head_dim].
  // Both or neither. max_seqlen_* are required for CUDA tensors (no device-to-host copy);
  // on the CPU they are computed when 0.
  std::optional<TensorView> cu_seqlens_q;
  std::optional<TensorView> cu_seqlens_k;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;

  // Backward: reduce dQ in a fixed order, so repeated calls are bitwise equal.
  bool deterministic = false;

  Backend backend = Backend::automatic;
  int num_threads = 0;        // CPU threads; 0: OpenMP's default (OMP_NUM_THREADS or all cores)
  void* cuda_stream = nullptr;  // cudaStream_t; nullptr: the default stream
  const Workspace* workspace = nullptr;

  // Memory-capped mode (fastattn/memory.hpp): the most device memory this call may need, in
  // bytes (its tensors + its scratch); over it, an out_of_memory Error before anything runs.
  // 0: the process-wide limit (set_device_memory_limit, FASTATTN_DEVICE_MEMORY_LIMIT), if any.
  // CUDA calls only; the CPU backends ignore it.
  std::size_t device_memory_limit_bytes = 0;
};

// What the dispatcher chose for a call, returned by every entry point and by plan_*.
struct KernelChoice {
  Backend backend = Backend::automatic;
  std::string kernel;     // e.g. "cpu.forward.avx2.f32"
  std::string isa;        // e.g. "avx2", "avx512bf16", "scalar", "sm80"
  int block_q = 0;        // query rows per tile
  int block_k = 0;        // key rows per tile
  int num_threads = 0;    // CPU threads or CUDA blocks per SM, as applies
  std::size_t workspace_bytes = 0;
  // CUDA: the device memory the call needs resident, its tensors plus workspace_bytes
  // (fastattn/memory.hpp); what memory-capped mode compares with the limit. 0 on the CPU.
  std::size_t device_memory_bytes = 0;
  std::string reason;     // why this kernel, in one sentence

  std::string describe() const;  // one line for logs and `fastattn info`
};

}  // namespace fastattn
