// attention_bench.cpp — allocation, FLOP counting and timing of one attention shape.
#include "attention_bench.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "common/dtype.hpp"
#include "common/mask.hpp"
#include "process_memory.hpp"

namespace fastattn::perf {

const char* to_string(Pass pass) noexcept {
  switch (pass) {
    case Pass::forward:
      return "fwd";
    case Pass::backward:
      return "bwd";
    case Pass::forward_backward:
      return "fwd+bwd";
  }
  return "?";
}

Pass pass_from_string(const std::string& name) {
  if (name == "fwd" || name == "forward") return Pass::forward;
  if (name == "bwd" || name == "backward") return Pass::backward;
  if (name == "fwdbwd" || name == "fwd+bwd" || name == "forward_backward")
    return Pass::forward_backward;
  throw Error(ErrorCode::invalid_argument, "pass: expected fwd, bwd or fwdbwd, got '" + name + "'");
}

DType dtype_from_string(const std::string& name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::f32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::f16;
  throw Error(ErrorCode::invalid_argument, "dtype: expected f32, bf16 or f16, got '" + name + "'");
}

Backend backend_from_string(const std::string& name) {
  if (name == "auto" || name == "automatic") return Backend::automatic;
  if (name == "cpu") return Backend::cpu;
  if (name == "reference") return Backend::reference;
  if (name == "cuda") return Backend::cuda;
  throw Error(ErrorCode::invalid_argument,
              "backend: expected auto, cpu, reference or cuda, got '" + name + "'");
}

std::string BenchShape::mask_label() const {
  const bool window = window_left >= 0 || window_right >= 0;
  std::string label = causal ? "causal" : (window ? "" : "none");
  if (window) {
    if (causal) label += "+";
    label += "window(" + std::to_string(window_left) + "," + std::to_string(window_right) + ")";
  }
  if (softcap > 0) label += " softcap";
  return label;
}

std::string BenchShape::label() const {
  std::string s = "b" + std::to_string(batch) + " h" + std::to_string(heads);
  if (kv_heads != heads) s += "/" + std::to_string(kv_heads);
  s += " s" + std::to_string(seqlen_q);
  if (seqlen_k != seqlen_q) s += "x" + std::to_string(seqlen_k);
  s += " d" + std::to_string(head_dim) + " " + to_string(dtype);
  if (kv_page_size == 0) s += " kv-cache";
  if (kv_page_size > 0) s += " kv-page" + std::to_string(kv_page_size);
  return s;
}

double visible_pairs(const BenchShape& shape) {
  // The same window the library resolves: causal is (window_left, 0), bottom-right aligned.
  SequenceMask mask;
  mask.left = shape.window_left;
  mask.right = shape.causal ? 0 : shape.window_right;
  mask.offset = shape.seqlen_k - shape.seqlen_q;
  mask.seqlen_k = shape.seqlen_k;
  double pairs = 0.0;
  for (std::int64_t i = 0; i < shape.seqlen_q; ++i) {
    const std::int64_t begin = mask.key_begin(i), end = mask.key_end(i + 1);
    pairs += static_cast<double>(std::max<std::int64_t>(0, end - begin));
  }
  return pairs;
}

double pass_flops(const BenchShape& shape, Pass pass) {
  const double forward =
      4.0 * static_cast<double>(shape.batch * shape.heads * shape.head_dim) * visible_pairs(shape);
  switch (pass) {
    case Pass::forward:
      return forward;
    case Pass::backward:
      return 2.5 * forward;
    case Pass::forward_backward:
      return 3.5 * forward;
  }
  return forward;
}

AttentionOptions options_for(const BenchShape& shape, Backend backend, int threads) {
  AttentionOptions o;
  o.causal = shape.causal;
  o.window_left = shape.window_left;
  o.window_right = shape.window_right;
  o.softcap = shape.softcap;
  o.backend = backend;
  o.num_threads = threads;
  return o;
}

// ---- tensors ---------------------------------------------------------------------------------

struct AttentionTensorsStorage {
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<void, FreeDeleter>> blocks;
};

namespace {

// Uniform in [-1, 1) from a counter-based hash (splitmix64): parallel and reproducible.
float uniform_at(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

void fill(const TensorView& t, std::uint64_t seed) {
  const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = uniform_at(seed, static_cast<std::uint64_t>(i));
    switch (t.dtype) {
      case DType::f32:
        static_cast<float*>(t.data)[i] = x;
        break;
      case DType::bf16:
        static_cast<std::uint16_t*>(t.data)[i] = float_to_bf16(x);
        break;
      case DType::f16:
        static_cast<std::uint16_t*>(t.data)[i] = float_to_f16(x);
        break;
      case DType::i32:
        static_cast<std::int32_t*>(t.data)[i] = 0;
        break;
    }
  }
}

}  // namespace

AttentionTensors::AttentionTensors(const BenchShape& s, bool with_gradients, std::uint64_t seed)
    : storage_(std::make_unique<AttentionTensorsStorage>()) {
  q = allocate(s.dtype, s.batch, s.seqlen_q, s.heads, s.head_dim, 4);
  k = allocate(s.dtype, s.batch, s.seqlen_k, s.kv_heads, s.head_dim, 4);
  v = allocate(s.dtype, s.batch, s.seqlen_k, s.kv_heads, s.head_dim, 4);
  out = allocate(s.dtype, s.batch, s.seqlen_q, s.heads, s.head_dim, 4);
  lse = allocate(DType::f32, s.batch, s.heads, s.seqlen_q, 0, 3);
  fill(q, seed * 16 + 1);
  fill(k, seed * 16 + 2);
  fill(v, seed * 16 + 3);
  fill(out, 0);  // touched so the output pages are resident too
  fill(lse, 0);
  if (!with_gradients) return;
  dout = allocate(s.dtype, s.batch, s.seqlen_q, s.heads, s.head_dim, 4);
  dq = allocate(s.dtype, s.batch, s.seqlen_q, s.heads, s.head_dim, 4);
  dk = allocate(s.dtype, s.batch, s.seqlen_k, s.kv_heads, s.head_dim, 4);
  dv = allocate(s.dtype, s.batch, s.seqlen_k, s.kv_heads, s.head_dim, 4);
  fill(dout, seed * 16 + 4);
  fill(dq, 0);
  fill(dk, 0);
  fill(dv, 0);
}

AttentionTensors::~AttentionTensors() = default;

TensorView AttentionTensors::allocate(DType dtype, std::int64_t d0, std::int64_t d1,
                                      std::int64_t d2, std::int64_t d3, int rank) {
  const std::int64_t numel = d0 * d1 * d2 * (rank == 4 ? d3 : 1);
  const std::size_t bytes = static_cast<std::size_t>(numel) * dtype_size(dtype);
  const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  void* data = std::aligned_alloc(64, rounded);
  if (!data)
    throw Error(ErrorCode::out_of_memory,
                "benchmark tensors: could not allocate " + std::to_string(rounded) + " bytes");
  storage_->blocks.emplace_back(data);
  bytes_ += static_cast<std::int64_t>(bytes);
  return rank == 4 ? make_tensor(data, dtype, {d0, d1, d2, d3})
                   : make_tensor(data, dtype, {d0, d1, d2});
}

// ---- timing ----------------------------------------------------------------------------------

BenchResult run_attention_bench(const BenchShape& shape, Pass pass, Backend backend, int threads,
                                const TimingOptions& timing, std::uint64_t seed) {
  BenchResult r;
  r.shape = shape;
  r.pass = pass;
  r.backend = backend;
  r.threads = threads > 0 ? threads : omp_get_max_threads();
  const bool grads = pass != Pass::forward;
  AttentionTensors t(shape, grads, seed);
  r.tensor_bytes = t.bytes();
  const AttentionOptions options = options_for(shape, backend, r.threads);

  // The first call (which reports the kernel choice) is the first warm-up call.
  TimingOptions rest = timing;
  rest.warmup = std::max(0, timing.warmup - 1);
  const PeakMemoryProbe memory;
  auto run_forward = [&] { return fastattn::forward(t.q, t.k, t.v, t.out, t.lse, options); };
  auto run_backward = [&] {
    return fastattn::backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv, options);
  };
  switch (pass) {
    case Pass::forward:
      r.kernel = run_forward();
      r.timing = time_repeated(run_forward, rest);
      break;
    case Pass::backward:
      run_forward();  // out and lse for the backward pass; not timed
      r.kernel = run_backward();
      r.timing = time_repeated(run_backward, rest);
      break;
    case Pass::forward_backward:
      r.kernel = run_forward();
      r.kernel_backward = run_backward();
      r.timing = time_repeated(
          [&] {
            run_forward();
            run_backward();
          },
          rest);
      break;
  }
  r.peak_extra_bytes = memory.bytes();
  r.peak_exact = memory.exact();
  r.gflops = pass_flops(shape, pass) / r.timing.median_s / 1e9;
  return r;
}

}  // namespace fastattn::perf
