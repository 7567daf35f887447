// attention_bench.hpp — one attention shape, timed: the shared core of `fastattn bench` and
// bench_cpu.
//
// FLOPs follow the flash-attn convention: forward = 4 * batch * heads * visible_pairs * head_dim
// (two matrix products of 2 FLOPs per multiply-add; a causal square mask sees about half the
// pairs), backward = 2.5 x forward, forward+backward = 3.5 x forward.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "fastattn/fastattn.hpp"
#include "timing.hpp"

namespace fastattn::perf {

enum class Pass { forward, backward, forward_backward };
const char* to_string(Pass pass) noexcept;
Pass pass_from_string(const std::string& name);  // "fwd", "bwd", "fwdbwd" (and long names)

DType dtype_from_string(const std::string& name);      // "f32", "bf16", "f16" (and aliases)
Backend backend_from_string(const std::string& name);  // "auto", "cpu", "reference", "cuda"

struct BenchShape {
  std::int64_t batch = 1;
  std::int64_t seqlen_q = 2048;
  std::int64_t seqlen_k = 2048;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 8;
  std::int64_t head_dim = 128;
  DType dtype = DType::f32;
  bool causal = false;
  std::int64_t window_left = -1;   // -1: unbounded
  std::int64_t window_right = -1;  // -1: unbounded
  float softcap = 0.0f;
  // KV-cache rows (kv_cache_bench.hpp): -1: a plain forward(); 0: attention_with_kv_cache over a
  // contiguous cache holding seqlen_k tokens per sequence; >= 1: over a paged cache of this page size.
  std::int64_t kv_page_size = -1;

  std::string mask_label() const;  // "none", "causal", "window(128,0)", "causal+window(..)"
  std::string label() const;       // "b1 h8/2 s2048x4096 d128 f32" (no mask; see mask_label)
};

// (query, key) pairs one (batch, head) computes, counted with the library's SequenceMask.
double visible_pairs(const BenchShape& shape);
double pass_flops(const BenchShape& shape, Pass pass);

AttentionOptions options_for(const BenchShape& shape, Backend backend, int threads);

// Owns the tensors of one shape, filled with uniform random values in [-1, 1) and touched,
// so their pages are resident before anything is timed. Gradient tensors (dout, dq, dk, dv)
// exist only when asked for.
class AttentionTensors {
 public:
  AttentionTensors(const BenchShape& shape, bool with_gradients, std::uint64_t seed = 1);
  ~AttentionTensors();
  AttentionTensors(const AttentionTensors&) = delete;
  AttentionTensors& operator=(const AttentionTensors&) = delete;

  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  std::int64_t bytes() const { return bytes_; }

 private:
  TensorView allocate(DType dtype, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                      std::int64_t d3, int rank);
  std::unique_ptr<struct AttentionTensorsStorage> storage_;
  std::int64_t bytes_ = 0;
};

struct BenchResult {
  BenchShape shape;
  Pass pass = Pass::forward;
  Backend backend = Backend::cpu;
  int threads = 0;
  Timing timing;
  double gflops = 0;                  // pass_flops / median time
  std::int64_t tensor_bytes = 0;      // inputs, outputs and gradients the benchmark allocated
  std::int64_t peak_extra_bytes = 0;  // peak RSS above the allocated tensors during the runs
  bool peak_exact = false;            // false: growth of the process-lifetime peak instead
  KernelChoice kernel;                // the forward's choice (the backward's for Pass::backward)
  std::optional<KernelChoice> kernel_backward;  // Pass::forward_backward only
};

BenchResult run_attention_bench(const BenchShape& shape, Pass pass, Backend backend, int threads,
                                const TimingOptions& timing, std::uint64_t seed = 1);

}  // namespace fastattn::perf
