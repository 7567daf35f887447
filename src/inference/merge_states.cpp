// merge_states.cpp — fastattn::merge_states: validate, choose, run (CPU and float64 reference
// here; CUDA in src/cuda/inference/merge_states.cu).
#include <omp.h>

#include <cstdint>
#include <string>

#include "common/dtype.hpp"
#include "fastattn/merge.hpp"
#include "inference/merge_problem.hpp"
#include "inference/merge_validate.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#include "cuda/inference/merge_states.hpp"
#endif

namespace fastattn {
namespace {

// Storage <-> float for each output dtype (common/dtype.hpp), as small types the row loop is
// instantiated with, so the f32 and bf16 loops vectorise.
struct F32 {
  using Storage = float;
  static float load(float x) { return x; }
  static float store(float x) { return x; }
};
struct F16 {
  using Storage = std::uint16_t;
  static float load(std::uint16_t x) { return f16_to_float(x); }
  static std::uint16_t store(float x) { return float_to_f16(x); }
};
struct Bf16 {
  using Storage = std::uint16_t;
  static float load(std::uint16_t x) { return bf16_to_float(x); }
  static std::uint16_t store(float x) { return float_to_bf16(x); }
};

std::int64_t out_offset(const TokenStrides& s, std::int64_t b, std::int64_t t, std::int64_t h) {
  return b * s.batch + t * s.token + h * s.head;
}
std::int64_t lse_offset(const LseStrides& s, std::int64_t b, std::int64_t t, std::int64_t h) {
  return b * s.batch + t * s.token + h * s.head;
}

// One pass over the rows; Real is float (the CPU backend: fp32 math, like the CUDA kernel) or
// double (Backend::reference: the oracle). Each element is read before it is written, by the
// same thread, so out may be out_a or out_b (in-place merge).
template <typename Elem, typename Real>
void merge_rows(const MergeProblem& p, int threads) {
  using Storage = typename Elem::Storage;
  const std::int64_t rows = p.rows(), heads = p.num_heads, seqlen = p.seqlen_q, dim = p.head_dim;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t h = r % heads, t = (r / heads) % seqlen, b = r / heads / seqlen;
    const Real lse_a = p.lse_a.data[lse_offset(p.lse_a.stride, b, t, h)];
    const Real lse_b = p.lse_b.data[lse_offset(p.lse_b.stride, b, t, h)];
    const MergeWeights<Real> w = merge_weights(lse_a, lse_b);
    const Storage* a = static_cast<const Storage*>(p.out_a.data) + out_offset(p.out_a.stride, b, t, h);
    const Storage* bp = static_cast<const Storage*>(p.out_b.data) + out_offset(p.out_b.stride, b, t, h);
    Storage* o = static_cast<Storage*>(p.out.data) + out_offset(p.out.stride, b, t, h);
    for (std::int64_t d = 0; d < dim; ++d) {
      const Real merged = weighted(w.weight_a, static_cast<Real>(Elem::load(a[d]))) +
                          weighted(w.weight_b, static_cast<Real>(Elem::load(bp[d])));
      o[d] = Elem::store(static_cast<float>(merged));
    }
    if (p.lse.data != nullptr) p.lse.data[lse_offset(p.lse.stride, b, t, h)] = static_cast<float>(w.lse);
  }
}

template <typename Real>
void merge_on_host(const MergeProblem& p, int threads) {
  switch (p.dtype) {
    case DType::f32: return merge_rows<F32, Real>(p, threads);
    case DType::f16: return merge_rows<F16, Real>(p, threads);
    case DType::bf16: return merge_rows<Bf16, Real>(p, threads);
    default: break;
  }
  throw Error(ErrorCode::internal, "merge_states: unvalidated dtype " + std::string(to_string(p.dtype)));
}

Backend resolve_backend(const MergeProblem& p, Backend requested) {
  const bool on_cpu = p.device.type == DeviceType::cpu;
  if (requested == Backend::automatic) return on_cpu ? Backend::cpu : Backend::cuda;
  if (requested == Backend::cuda && on_cpu) {
    throw Error(ErrorCode::invalid_argument, "options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda");
  }
  if (requested != Backend::cuda && !on_cpu) {
    throw Error(ErrorCode::invalid_argument, std::string("options.backend: expected cuda or automatic for tensors on ") +
                                                 to_string(p.device) + ", got " + to_string(requested));
  }
  return requested;
}

KernelChoice choose(const MergeProblem& p, const MergeOptions& options) {
  KernelChoice c;
  c.backend = resolve_backend(p, options.backend);
  const std::string dtype = to_string(p.dtype);
  if (c.backend == Backend::reference) {
    c.kernel = "reference.merge_states.f64";
    c.isa = "scalar";
    c.num_threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
    c.reason = "requested: float64 math, rounded once to " + dtype;
    return c;
  }
  if (c.backend == Backend::cpu) {
    c.kernel = "cpu.merge_states." + dtype;
    c.isa = "generic";
    c.num_threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
    c.reason = "one pass over (batch, token, head) rows, threads over rows, fp32 math (memory-bound)";
    return c;
  }
#if FASTATTN_HAVE_CUDA
  const cuda::MergeLaunch launch = cuda::plan_merge(p);
  const bool vectors = launch.vector_elems > 1;
  const int cc = cuda::compute_capability(p.device.index);
  c.kernel = "cuda.merge_states." + dtype + (vectors ? ".vec" + std::to_string(launch.vector_elems) : ".scalar");
  c.isa = "sm" + std::to_string(cc);
  c.block_q = launch.threads_y;
  c.num_threads = launch.threads_x * launch.threads_y;
  c.reason = std::to_string(launch.threads_y) + " rows per block of " + std::to_string(c.num_threads) +
             " threads, fp32 math, " +
             (vectors ? std::string("16-byte loads and stores") : std::string("element loads: ") + launch.why_scalar);
  return c;
#else
  throw Error(ErrorCode::unsupported, "cuda merge_states: this build of fastattn has no CUDA backend");
#endif
}

}  // namespace

KernelChoice plan_merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                               const TensorView& lse_b, const TensorView& out,
                               const std::optional<TensorView>& lse, const MergeOptions& options) {
  return choose(validate_merge(out_a, lse_a, out_b, lse_b, out, lse, options), options);
}

KernelChoice merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                          const TensorView& lse_b, const TensorView& out, const std::optional<TensorView>& lse,
                          const MergeOptions& options) {
  const MergeProblem p = validate_merge(out_a, lse_a, out_b, lse_b, out, lse, options);
  const KernelChoice choice = choose(p, options);
  if (p.rows() == 0) return choice;  // nothing to write
  switch (choice.backend) {
    case Backend::reference: merge_on_host<double>(p, choice.num_threads); break;
    case Backend::cpu: merge_on_host<float>(p, choice.num_threads); break;
#if FASTATTN_HAVE_CUDA
    case Backend::cuda: cuda::merge_states(p, cuda::plan_merge(p)); break;
#endif
    default: throw Error(ErrorCode::internal, "merge_states: dispatcher chose an unbuilt backend");
  }
  return choice;
}

}  // namespace fastattn
