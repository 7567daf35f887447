// partial_runner.cpp — see partial_runner.hpp. The plan-time half mirrors KVCachePlan's
// constructor (src/api/kv_cache.cpp: route from the shape, scratch once); the run half validates
// the call with out seen as q's dtype (the public check: out dtype == q dtype), then sets
// out_f32 and runs the route's kernel directly.
#include "cooperative/partial_runner.hpp"

#include <cstdlib>
#include <string>

#include "api/host_pool.hpp"
#include "api/kv_cache_validate.hpp"
#include "cooperative/cooperative_internal.hpp"
#include "cpu/decode_keys.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/inference/kv_cache_host.hpp"
#endif

namespace fastattn::coop {

struct PartialRunner::Impl {
  KVCacheShape shape;
  AttentionOptions options;
  KVCacheRoute route;
  bool f32 = false;                    // the route writes out in f32
  std::optional<KVCachePlan> fallback;  // routes without an f32 output
  AlignedBlock host;
  cpu::DecodeBuffers decode;
#if FASTATTN_HAVE_CUDA
  std::unique_ptr<cuda::KVCachePlanScratch> device;
#endif
};

PartialRunner::PartialRunner(const KVCacheShape& shape, const AttentionOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.shape = shape;
  m.options = options;
  m.route = plan_kv_cache_route(shape, options).route;
  const bool half = shape.dtype == DType::bf16 || shape.dtype == DType::f16;
  m.f32 = half && (m.route.kernel == KVCacheKernel::cpu_decode || m.route.kernel == KVCacheKernel::cuda);
  if (!m.f32) {
    m.fallback.emplace(shape, options);
    m.route.choice = m.fallback->choice();
    return;
  }
  m.route.choice.reason += "; out written in f32 (the cooperative step's unrounded partial)";
  if (m.route.kernel == KVCacheKernel::cpu_decode) {
    const std::size_t bytes = m.route.host_scratch_bytes();
    if (bytes > 0) {
      m.host = allocate_aligned(bytes, "cooperative step (a part's plan)");
      auto* base = static_cast<unsigned char*>(m.host.get());
      m.decode.parts = reinterpret_cast<float*>(base);
      m.decode.threads = reinterpret_cast<float*>(base + m.route.decode_scratch.parts_bytes);
    }
  }
#if FASTATTN_HAVE_CUDA
  if (m.route.kernel == KVCacheKernel::cuda && m.route.launch.scratch_bytes > 0) {
    m.device = std::make_unique<cuda::KVCachePlanScratch>(shape.device.index, m.route.launch.scratch_bytes);
    // Zeroed once, as KVCachePlan's: a kernel that keeps state in its scratch across launches
    // (e.g. arrival counters left at zero by every launch) finds it at zero on the first run.
    cuda_zero(shape.device.index, m.device->data(), m.route.launch.scratch_bytes);
  }
#endif
}

PartialRunner::PartialRunner() = default;
PartialRunner::~PartialRunner() = default;
PartialRunner::PartialRunner(PartialRunner&&) noexcept = default;
PartialRunner& PartialRunner::operator=(PartialRunner&&) noexcept = default;

DType PartialRunner::out_dtype() const { return impl_->f32 ? DType::f32 : impl_->shape.dtype; }
const KernelChoice& PartialRunner::choice() const { return impl_->route.choice; }

void PartialRunner::run(const TensorView& q, const KVCache& cache, void* out, float* lse, void* cuda_stream) const {
  const Impl& m = *impl_;
  const TensorView out_view = make_tensor(out, q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]}, q.device);
  const TensorView lse_view = make_tensor(lse, DType::f32, {1, q.shape[2], q.shape[1]}, q.device);
  if (!m.f32) {
    (void)m.fallback->run(q, cache, out_view, lse_view, std::nullopt, cuda_stream);
    return;
  }
  // Validated as a call with out in q's dtype (same shape and element strides), then widened.
  KVCacheProblem p = validate_kv_cache(q, cache, out_view, lse_view, std::nullopt, m.options);
  check_matches_plan(m.shape, kv_cache_shape_of(p));
  p.attn.cuda_stream = cuda_stream;
  p.out_f32 = true;
  if (m.route.kernel == KVCacheKernel::cpu_decode) {
    if (p.attn.total_q == 0) return;
    const cpu::DecodeKeys keys = cpu::DecodeKeys::of(p);
    cpu::run_decode_plan(p.attn, m.route.decode, m.route.isa, &keys, m.decode);
    return;
  }
#if FASTATTN_HAVE_CUDA
  if (p.attn.batch == 0 || p.attn.total_q == 0) return;
  cuda::kv_cache_run(p, m.route.launch, m.device ? m.device->data() : nullptr);
#endif
}

}  // namespace fastattn::coop
