// kv_cache.cpp — the public KV-cache entry points (fastattn/kv_cache.hpp): validate, check the
// values (eager calls), choose (kv_cache_route.hpp), append, attend.
//
// An eager call and a plan's run share everything but two steps: the eager call reads
// seqlens / block_table (on CUDA a copy to the host) to check them and to size its split
// counts for its longest cache, and takes its scratch per call; a plan sizes for
// shape.max_cache_len and owns its scratch (host memory for the CPU, device memory for CUDA),
// so its run neither synchronises nor allocates.
#include "fastattn/kv_cache.hpp"

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "api/device_memory.hpp"
#include "api/host_pool.hpp"
#include "api/kv_cache_route.hpp"
#include "api/kv_cache_validate.hpp"
#include "cpu/kv_cache.hpp"
#include "inference/kv_cache_gather.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/common/workspace_check.hpp"
#include "cuda/inference/kv_cache_host.hpp"
#endif

namespace fastattn {
namespace {

// Scratch a call runs on; null members: taken per call from the host pools.
struct KVCacheScratch {
  cpu::DecodeBuffers decode;
  void* gather = nullptr;
  void* device = nullptr;
};

// Appends (when asked) and attends, on the route's kernel. Values are checked (eager) or the
// kernels' clamps apply (a plan's run).
void execute(const KVCacheProblem& p, const KVCacheRoute& r, const KVCacheScratch& s) {
  switch (r.kernel) {
    case KVCacheKernel::reference:
      cpu::kv_cache_append(p, r.threads);
      kv_cache_reference(p);
      return;
    case KVCacheKernel::cpu_decode: {
      cpu::kv_cache_append(p, r.threads);
      if (p.attn.total_q == 0) return;
      const cpu::DecodeKeys keys = cpu::DecodeKeys::of(p);
      cpu::run_decode_plan(p.attn, r.decode, r.isa, &keys, s.decode);
      return;
    }
    case KVCacheKernel::cpu_prefill: {
      cpu::kv_cache_append(p, r.threads);
      if (p.attn.total_q == 0) return;
      if (s.gather != nullptr || r.gather_bytes == 0) {
        cpu::kv_cache_gather_forward(p, r.forward_plan, s.gather, r.gather_bytes);
      } else {
        const HostScratch gather(nullptr, r.gather_bytes);
        cpu::kv_cache_gather_forward(p, r.forward_plan, gather.data(), r.gather_bytes);
      }
      return;
    }
    case KVCacheKernel::cuda:
#if FASTATTN_HAVE_CUDA
      if (p.attn.batch == 0 || (p.attn.total_q == 0 && p.seqlen_new == 0)) return;
      if (s.device != nullptr || r.launch.scratch_bytes == 0) {
        cuda::kv_cache_run(p, r.launch, s.device);
      } else {
        cuda::kv_cache_eager(p, r.launch);
      }
      return;
#else
      break;
#endif
  }
  throw Error(ErrorCode::internal, "kv_cache: the route chose an unbuilt backend");
}

// Memory-capped mode for CUDA calls (fastattn/memory.hpp): tensors + scratch against the limit.
void check_cuda_memory(KernelChoice& c, const KVCacheProblem& p, bool with_lse, std::size_t limit_option) {
  if (c.backend != Backend::cuda) return;
  DeviceMemoryNeed need;
  need.tensor_bytes = kv_cache_tensor_bytes(p, with_lse);
  need.scratch_bytes = c.workspace_bytes;
  c.device_memory_bytes = need.total();
  check_device_memory("cuda kv_cache", need, effective_device_memory_limit(limit_option));
}

}  // namespace

KernelChoice attention_with_kv_cache(const TensorView& q, const KVCache& cache, const TensorView& out,
                                     const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                                     const AttentionOptions& options) {
  const KVCacheProblem p = validate_kv_cache(q, cache, out, lse, append, options);
  // The values, before anything is written: seqlens in range, the append fits, the pages
  // used exist. On CUDA from host copies (this synchronises the stream).
  std::int64_t longest = 0;
  if (p.attn.device.type == DeviceType::cpu) {
    longest = check_kv_cache_values(p, p.seqlens, p.block_table, p.block_table_stride);
  } else {
#if FASTATTN_HAVE_CUDA
    const cuda::KVCacheIndices host = cuda::read_kv_cache_indices(p);
    longest = check_kv_cache_values(p, host.seqlens.data(), host.block_table.data(), p.block_table_stride);
#endif
  }
  const KVCacheRoute route = choose_kv_cache_route(p, options.backend, longest);
  KernelChoice choice = route.choice;
  check_cuda_memory(choice, p, lse.has_value(), options.device_memory_limit_bytes);
  execute(p, route, KVCacheScratch{});
  return choice;
}

KVCacheShape kv_cache_shape(const TensorView& q, const KVCache& cache, const std::optional<TensorView>& lse,
                            const std::optional<KVAppend>& append) {
  return kv_cache_shape_of(validate_kv_cache_structure(q, cache, lse, append));
}

struct KVCachePlan::Impl {
  KVCacheShape shape;
  AttentionOptions options;
  KVCacheRoute route;
  AlignedBlock host;  // the CPU route's scratch
  KVCacheScratch scratch;
#if FASTATTN_HAVE_CUDA
  std::unique_ptr<cuda::KVCachePlanScratch> device;
#endif
};

KVCachePlan::KVCachePlan(const KVCacheShape& shape, const AttentionOptions& options) : impl_(std::make_unique<Impl>()) {
  PlannedKVCacheRoute planned = plan_kv_cache_route(shape, options);
  Impl& m = *impl_;
  m.shape = shape;
  m.options = options;
  const KVCacheProblem& p = planned.problem;
  m.route = std::move(planned.route);
  if (m.route.kernel == KVCacheKernel::cpu_prefill) {
    // A run may see caches longer than max_cache_len (the splits are only sized for it): the
    // gather buffer holds the most a sequence can show, its capacity (or its window).
    m.route.gather_bytes = cpu::kv_cache_gather_bytes(p, p.capacity());
    m.route.choice.workspace_bytes = m.route.host_scratch_bytes();
  }
  check_cuda_memory(m.route.choice, p, shape.with_lse, options.device_memory_limit_bytes);

  // Scratch, allocated once here. CPU: the decode partials, then each thread's tiles (64-byte
  // multiples), or the gather buffer.
  const std::size_t host_bytes = m.route.host_scratch_bytes();
  if (host_bytes > 0) {
    m.host = allocate_aligned(host_bytes, "kv_cache plan");
    auto* base = static_cast<unsigned char*>(m.host.get());
    if (m.route.kernel == KVCacheKernel::cpu_decode) {
      m.scratch.decode.parts = reinterpret_cast<float*>(base);
      m.scratch.decode.threads = reinterpret_cast<float*>(base + m.route.decode_scratch.parts_bytes);
    } else {
      m.scratch.gather = base;
    }
  }
#if FASTATTN_HAVE_CUDA
  if (m.route.kernel == KVCacheKernel::cuda && m.route.launch.scratch_bytes > 0) {
    if (options.workspace != nullptr) {  // the caller's memory (size and alignment checked here), for the plan's life
      cuda::check_workspace(*options.workspace, m.route.launch.scratch_bytes);
      m.scratch.device = options.workspace->data;
    } else {
      m.device = std::make_unique<cuda::KVCachePlanScratch>(shape.device.index, m.route.launch.scratch_bytes);
      m.scratch.device = m.device->data();
    }
    // The fused combine's counters start at zero, and every run leaves them so: runs need no memset.
    cuda::kv_cache_zero_counters(m.route.launch, m.scratch.device, shape.device.index);
  }
#endif
}

KVCachePlan::~KVCachePlan() = default;
KVCachePlan::KVCachePlan(KVCachePlan&&) noexcept = default;
KVCachePlan& KVCachePlan::operator=(KVCachePlan&&) noexcept = default;

const KernelChoice& KVCachePlan::run(const TensorView& q, const KVCache& cache, const TensorView& out,
                                     const std::optional<TensorView>& lse,
                                     const std::optional<KVAppend>& append) const {
  return run(q, cache, out, lse, append, impl_->options.cuda_stream);
}

const KernelChoice& KVCachePlan::run(const TensorView& q, const KVCache& cache, const TensorView& out,
                                     const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                                     void* cuda_stream) const {
  const Impl& m = *impl_;
  KVCacheProblem p = validate_kv_cache(q, cache, out, lse, append, m.options);
  check_matches_plan(m.shape, kv_cache_shape_of(p));
  p.attn.cuda_stream = cuda_stream;
  execute(p, m.route, m.scratch);
  return m.route.choice;
}

const KVCacheShape& KVCachePlan::shape() const { return impl_->shape; }
const KernelChoice& KVCachePlan::choice() const { return impl_->route.choice; }

}  // namespace fastattn
