// kv_cache_route.cpp — see kv_cache_route.hpp. Read top to bottom: backend from the device (or
// the caller's request); on the CPU the decode kernel when decode_plan takes the shape (short
// queries: GQA-packed rows, split keys, pages read in place), else the prefill kernel over each
// sequence's gathered pages; on CUDA the launch plan of src/cuda/inference/.
#include "api/kv_cache_route.hpp"

#include <omp.h>

#include <string>

#include "api/dispatch.hpp"
#include "api/kv_cache_validate.hpp"
#include "cpu/kv_cache.hpp"
#include "fastattn/error.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace fastattn {
namespace {

Backend resolve_backend(const AttentionProblem& p, Backend requested) {
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

// "paged cache (page size 16, 64 pages of 8 slots per sequence)" / "contiguous cache (capacity 4096)".
std::string cache_text(const KVCacheProblem& p) {
  if (!p.is_paged()) return "contiguous cache (capacity " + std::to_string(p.page_size) + ")";
  return "paged cache (page size " + std::to_string(p.page_size) + ", " + std::to_string(p.num_pages) + " pages, " +
         std::to_string(p.max_pages_per_seq) + " per sequence)";
}

// The forward problem the CPU planners size for: the cache's keys up to max_cache_len.
AttentionProblem planned_attention(const KVCacheProblem& p, std::int64_t max_cache_len) {
  AttentionProblem a = p.attn;
  a.seqlen_k = max_cache_len;
  return a;
}

void choose_cpu(const KVCacheProblem& p, KVCacheRoute& r) {
  const AttentionProblem a = planned_attention(p, r.max_cache_len);
  r.threads = a.num_threads > 0 ? a.num_threads : omp_get_max_threads();
  // The decode kernel (decode_plan: seqlen_q <= kDecodeMaxQueries, or FASTATTN_CPU_DECODE), as
  // the dispatcher plans it for the forward of this problem: its plan, on its ISA (AMX only
  // where its tiles run), and its name.
  cpu::CpuKernelPlan plan;
  const KernelChoice named = choose_kernel(a, Direction::forward, Backend::cpu, nullptr, &plan);
  if (plan.decode.use) {
    r.kernel = KVCacheKernel::cpu_decode;
    r.decode = plan.decode;
    r.isa = plan.isa;
    r.decode_scratch = cpu::decode_scratch_size(a, r.decode);
    r.choice = named;
    r.choice.kernel = "cpu.kv_cache." + r.choice.kernel.substr(4);   // cpu.decode... -> cpu.kv_cache.decode...
    r.choice.reason = cache_text(p) + ", K/V rows read through the " +
                      (p.is_paged() ? std::string("block table one page run at a time") : std::string("cache in place")) +
                      ", splits sized for caches of " + std::to_string(r.max_cache_len) + " tokens; " + r.choice.reason;
    r.choice.workspace_bytes = r.host_scratch_bytes();
    return;
  }
  // Beyond the decode kernel (chunked prefill): the prefill kernel over one sequence at a time.
  r.kernel = KVCacheKernel::cpu_prefill;
  AttentionProblem one = a;
  one.batch = 1;
  one.total_q = a.seqlen_q;
  r.forward_choice = choose_kernel(one, Direction::forward, Backend::cpu, nullptr, &r.forward_plan);
  r.gather_bytes = cpu::kv_cache_gather_bytes(p, r.max_cache_len);
  r.choice = r.forward_choice;
  r.choice.kernel = std::string(p.is_paged() ? "cpu.kv_cache.gather." : "cpu.kv_cache.") + r.forward_choice.kernel.substr(4);
  r.choice.reason = "seqlen_q " + std::to_string(a.seqlen_q) + " not for the decode kernel (seqlen_q <= " +
                    std::to_string(cpu::kDecodeMaxQueries) + ", or FASTATTN_CPU_DECODE): per sequence, " +
                    (p.is_paged() ? "the visible keys gathered from the " + cache_text(p) + " into contiguous host scratch"
                                  : "the visible keys of the " + cache_text(p) + " read in place") +
                    ", then the prefill kernel (" + r.forward_choice.reason + ")";
  r.choice.workspace_bytes = r.host_scratch_bytes();
}

}  // namespace

std::size_t KVCacheRoute::host_scratch_bytes() const {
  switch (kernel) {
    case KVCacheKernel::cpu_decode:
      return decode_scratch.parts_bytes + static_cast<std::size_t>(decode.threads) * decode_scratch.thread_bytes;
    case KVCacheKernel::cpu_prefill: return gather_bytes;
    default: return 0;
  }
}

KVCacheRoute choose_kv_cache_route(const KVCacheProblem& p, Backend requested, std::int64_t max_cache_len) {
  KVCacheRoute r;
  r.max_cache_len = max_cache_len;
  r.choice.backend = resolve_backend(p.attn, requested);
  if (r.choice.backend == Backend::reference) {
    r.kernel = KVCacheKernel::reference;
    r.threads = p.attn.num_threads > 0 ? p.attn.num_threads : omp_get_max_threads();
    r.choice.kernel = "reference.kv_cache.f64";
    r.choice.isa = "scalar";
    r.choice.num_threads = r.threads;
    r.choice.reason = "requested: float64 oracle over each sequence's keys gathered from the " + cache_text(p);
    return r;
  }
  if (r.choice.backend == Backend::cpu) {
    choose_cpu(p, r);
    return r;
  }
#if FASTATTN_HAVE_CUDA
  r.kernel = KVCacheKernel::cuda;
  r.launch = cuda::kv_cache_plan(p, max_cache_len);
  r.choice.backend = Backend::cuda;
  const int cc = cuda::compute_capability(p.attn.device.index);
  r.choice.isa = "sm" + std::to_string(cc);
  r.choice.kernel = r.launch.kernel;
  r.choice.block_q = r.launch.rows_per_tile;
  r.choice.block_k = r.launch.block_k;
  r.choice.workspace_bytes = r.launch.scratch_bytes;
  r.choice.reason = cache_text(p) + ", splits sized for caches of " + std::to_string(max_cache_len) + " tokens; " +
                    r.launch.reason;
  return r;
#else
  throw Error(ErrorCode::unsupported, "cuda kv_cache: this build of fastattn has no CUDA backend");
#endif
}

std::size_t kv_cache_tensor_bytes(const KVCacheProblem& p, bool with_lse) {
  const AttentionProblem& a = p.attn;
  const auto n = [](std::int64_t x) { return static_cast<std::size_t>(x > 0 ? x : 0); };
  const std::size_t elem = dtype_size(a.dtype);
  std::size_t bytes = 2 * n(a.total_q) * n(a.num_heads) * n(a.head_dim) * elem;        // q, out
  bytes += 2 * n(p.num_pages) * n(p.page_size) * n(a.num_kv_heads) * n(a.head_dim) * elem;  // cache k, v
  bytes += 2 * n(a.batch) * n(p.seqlen_new) * n(a.num_kv_heads) * n(a.head_dim) * elem;  // append
  if (with_lse) bytes += n(a.total_q) * n(a.num_heads) * sizeof(float);
  bytes += n(a.batch) * sizeof(std::int32_t);                                             // seqlens
  if (p.is_paged()) bytes += n(a.batch) * n(p.max_pages_per_seq) * sizeof(std::int32_t);  // block table
  return bytes;
}

PlannedKVCacheRoute plan_kv_cache_route(const KVCacheShape& shape, const AttentionOptions& options) {
  check_kv_cache_shape(shape, options);
  PlannedKVCacheRoute planned{kv_cache_problem_of(shape, options), {}};
  const std::int64_t max_cache_len = shape.max_cache_len > 0 ? shape.max_cache_len : planned.problem.capacity();
  planned.route = choose_kv_cache_route(planned.problem, options.backend, max_cache_len);
  return planned;
}

}  // namespace fastattn
