// step.cpp — cooperative_attention (fastattn/cooperative.hpp): checks the call, asks the chooser
// for the split, lays the sequence's pages out per part (StepPlan), and runs the step on CUDA
// (step_cuda.cu) or in the CPU emulation (step_cpu.cpp).
#include <algorithm>
#include <memory>
#include <string>

#include "cooperative/cooperative_internal.hpp"

namespace fastattn {

namespace {

[[noreturn]] void fail(const std::string& name, const std::string& expected, const std::string& got,
                       ErrorCode code = ErrorCode::invalid_argument) {
  throw Error(code, name + ": expected " + expected + ", got " + got);
}

std::string str(std::int64_t v) { return std::to_string(v); }

// q-like: [1, seqlen_q, heads, head_dim], head_dim contiguous.
void check_q_like(const TensorView& t, const std::string& name, const TensorView& q, const CooperativeKVCache& cache) {
  const auto& c = cache.config();
  if (t.rank != 4 || t.shape[0] != 1) fail(name, "shape [1, seqlen_q, num_heads, head_dim]", t.shape_string());
  if (t.dtype != c.dtype) fail(name, std::string("dtype ") + to_string(c.dtype) + " (the cache's)", std::string("dtype ") + to_string(t.dtype));
  if (t.shape[3] != c.head_dim) fail(name, "head_dim (shape[3]) = " + str(c.head_dim) + " (the cache's)", str(t.shape[3]));
  if (t.stride[3] != 1) fail(name, "head_dim contiguous (stride[3] = 1)", str(t.stride[3]));
  if (t.device != c.device) fail(name, "the cache's device " + to_string(c.device), to_string(t.device));
  if (t.data == nullptr && t.numel() > 0) fail(name, "a data pointer", "null");
  if (&t != &q && (t.shape[1] != q.shape[1] || t.shape[2] != q.shape[2])) fail(name, "shape " + q.shape_string() + " (as q)", t.shape_string());
}

void check_call(const TensorView& q, const CooperativeKVCache& cache, std::int64_t seq, const TensorView* out,
                const TensorView* lse, const CooperativeNewKV* new_kv, const CooperativeOptions& options) {
  const auto& c = cache.config();
  check_q_like(q, "q", q, cache);
  if (q.shape[2] % c.num_kv_heads != 0) {
    fail("q", "num_heads (shape[2]) a multiple of the cache's num_kv_heads = " + str(c.num_kv_heads), str(q.shape[2]));
  }
  (void)cache.length(seq);  // the sequence id
  if (out != nullptr) {
    check_q_like(*out, "out", q, cache);
    if (out->data == q.data) fail("out", "memory apart from q", "out.data == q.data");
  }
  if (lse != nullptr) {
    if (lse->rank != 3 || lse->shape[0] != 1 || lse->shape[1] != q.shape[2] || lse->shape[2] != q.shape[1]) {
      fail("lse", "shape [1, " + str(q.shape[2]) + ", " + str(q.shape[1]) + "] (1, num_heads, seqlen_q)", lse->shape_string());
    }
    if (lse->dtype != DType::f32) fail("lse", "dtype f32", std::string("dtype ") + to_string(lse->dtype));
    if (lse->device != c.device) fail("lse", "the cache's device " + to_string(c.device), to_string(lse->device));
  }
  if (new_kv != nullptr) {
    for (int which = 0; which < 2; ++which) {
      const TensorView& t = which == 0 ? new_kv->k : new_kv->v;
      const std::string name = which == 0 ? "new_kv.k" : "new_kv.v";
      if (t.rank != 4 || t.shape[0] != 1 || t.shape[2] != c.num_kv_heads || t.shape[3] != c.head_dim) {
        fail(name, "shape [1, seqlen_new, " + str(c.num_kv_heads) + ", " + str(c.head_dim) + "]", t.shape_string());
      }
      if (t.dtype != c.dtype) fail(name, std::string("dtype ") + to_string(c.dtype), std::string("dtype ") + to_string(t.dtype));
      if (t.device != c.device) fail(name, "the cache's device " + to_string(c.device), to_string(t.device));
      if (t.stride[3] != 1) fail(name, "head_dim contiguous (stride[3] = 1)", str(t.stride[3]));
    }
    if (new_kv->k.shape[1] != new_kv->v.shape[1]) fail("new_kv.v", "seqlen_new = " + str(new_kv->k.shape[1]) + " (as new_kv.k)", str(new_kv->v.shape[1]));
  }
  const auto& a = options.attention;
  if (a.window_left >= 0 || a.window_right >= 0) {
    fail("options.attention.window_left/right", "-1 (no window: the cooperative step attends every cached token)",
         "(" + str(a.window_left) + ", " + str(a.window_right) + ")", ErrorCode::unsupported);
  }
  if (a.cu_seqlens_q || a.cu_seqlens_k) fail("options.attention.cu_seqlens_q/k", "absent", "present");
  if (a.alignment != MaskAlignment::bottom_right) fail("options.attention.alignment", "bottom_right", "top_left");
  if (options.parts == 0 || options.parts > 7) fail("options.parts", "bits of 1 (device), 2 (streamed), 4 (CPU), not 0", str(options.parts));
}

}  // namespace

namespace coop {

StepPlan make_step_plan(const TensorView& q, const CooperativeKVCache& cache, std::int64_t seq,
                        const CooperativeOptions& options) {
  const auto& c = cache.config();
  const auto& pages = cache.pages(seq);
  const std::int64_t len = cache.length(seq);
  const std::int64_t ps = c.page_size;
  StepPlan plan;
  plan.seqlen_q = q.shape[1];
  plan.num_heads = q.shape[2];
  plan.head_dim = c.head_dim;
  plan.num_kv_heads = c.num_kv_heads;
  // Pages in token order, per tier; the host ones with their token counts.
  std::vector<std::int32_t> host;
  std::vector<std::int64_t> host_tokens;
  for (std::size_t j = 0; j < pages.size(); ++j) {
    const std::int64_t tokens = std::min<std::int64_t>(ps, len - static_cast<std::int64_t>(j) * ps);
    if (cache.tier(pages[j]) == PageTier::device) {
      plan.device.local.push_back(pages[j]);
      plan.device.tokens += tokens;
    } else {
      host.push_back(static_cast<std::int32_t>(pages[j] - cache.device_pages()));
      host_tokens.push_back(tokens);
    }
  }
  const CooperativeRates rates = options.rates ? *options.rates : measure_cooperative_rates(c.device, options.cpu_threads);
  const std::int64_t staging_pages = static_cast<std::int64_t>(cache.staging_bytes() / 2 / cache.page_bytes());
  plan.split = choose_cooperative_split(static_cast<std::int64_t>(plan.device.local.size()),
                                        static_cast<std::int64_t>(host.size()), ps, c.num_kv_heads, c.head_dim,
                                        c.dtype, plan.seqlen_q, plan.num_heads, staging_pages, rates, options);
  plan.split.choice.backend = c.device.type == DeviceType::cuda ? Backend::cuda : Backend::cpu;
  plan.split.choice.kernel = c.device.type == DeviceType::cuda ? "cooperative.cuda+cpu" : "cooperative.cpu_emulated";
  if (plan.split.gpu_kernel == CooperativeKernel::forward) {
    for (std::size_t j = 0; j < plan.device.local.size(); ++j) {
      const std::int32_t page = plan.device.local[j];
      const std::int64_t tokens = std::min<std::int64_t>(ps, plan.device.tokens - static_cast<std::int64_t>(j) * ps);
      if (plan.device_runs.empty() || page != plan.device_runs.back().first + plan.device_runs.back().tokens / ps ||
          plan.device_runs.back().tokens % ps != 0) {
        plan.device_runs.push_back({page, 0});
      }
      plan.device_runs.back().tokens += tokens;
    }
  }
  const std::int64_t x = plan.split.streamed_pages;
  for (std::int64_t i = 0; i < x; ++i) {
    if (i % plan.split.chunk_pages == 0) plan.chunks.emplace_back();
    auto& chunk = plan.chunks.back();
    chunk.local.push_back(host[static_cast<std::size_t>(i)]);
    chunk.tokens.push_back(host_tokens[static_cast<std::size_t>(i)]);
    chunk.total += host_tokens[static_cast<std::size_t>(i)];
  }
  for (std::size_t i = static_cast<std::size_t>(x); i < host.size(); ++i) {
    plan.cpu.local.push_back(host[i]);
    plan.cpu.tokens += host_tokens[i];
  }
  plan.run_device = (options.parts & 1u) != 0;
  plan.run_streamed = (options.parts & 2u) != 0;
  plan.run_cpu = (options.parts & 4u) != 0;
  return plan;
}

}  // namespace coop

struct CooperativeStep::Impl {
  const CooperativeKVCache* cache = nullptr;
  CooperativeOptions options;  // options.rates: the rates of the next run (refined by the runs)
  std::string rates_source;    // options.rates->source before any refinement
  int runs = 0;                // run() calls so far
  std::int64_t seqlen_q = 0, num_heads = 0;
  std::unique_ptr<coop::StepBackend> backend;
};

CooperativeStep::CooperativeStep(const TensorView& q, const CooperativeKVCache& cache, const CooperativeOptions& options)
    : impl_(std::make_unique<Impl>()) {
  check_call(q, cache, 0, nullptr, nullptr, nullptr, options);
  Impl& m = *impl_;
  m.cache = &cache;
  m.options = options;
  if (!m.options.rates) m.options.rates = measure_cooperative_rates(cache.config().device, options.cpu_threads);
  m.rates_source = m.options.rates->source;
  m.seqlen_q = q.shape[1];
  m.num_heads = q.shape[2];
  if (cache.config().device.type == DeviceType::cpu) {
    m.backend = coop::make_step_cpu(q, cache, m.options);
  } else {
#if FASTATTN_HAVE_CUDA
    m.backend = coop::make_step_cuda(q, cache, m.options);
#else
    throw Error(ErrorCode::unsupported, "cache: expected a CPU cache (this build has no CUDA backend), got cuda");
#endif
  }
}

CooperativeStep::~CooperativeStep() = default;
CooperativeStep::CooperativeStep(CooperativeStep&&) noexcept = default;
CooperativeStep& CooperativeStep::operator=(CooperativeStep&&) noexcept = default;

KernelChoice CooperativeStep::run(const TensorView& q, std::int64_t seq, const TensorView& out,
                                  const std::optional<TensorView>& lse, const std::optional<CooperativeNewKV>& new_kv) {
  Impl& m = *impl_;
  const TensorView* lse_p = lse ? &*lse : nullptr;
  const CooperativeNewKV* new_p = new_kv ? &*new_kv : nullptr;
  check_call(q, *m.cache, seq, &out, lse_p, new_p, m.options);
  if (q.shape[1] != m.seqlen_q || q.shape[2] != m.num_heads) {
    fail("q", "shape [1, " + str(m.seqlen_q) + ", " + str(m.num_heads) + ", " + str(q.shape[3]) + "] (the step's)",
         q.shape_string());
  }
  const coop::StepPlan plan = coop::make_step_plan(q, *m.cache, seq, m.options);
  m.backend->run(plan, q, out, lse_p, new_p, m.options);
  ++m.runs;
  if (m.options.refine_rates && m.options.policy == SplitPolicy::automatic && m.options.parts == 7u) {
    (void)coop::refine_cooperative_rates(*m.options.rates, m.rates_source, plan.split,
                                         static_cast<double>(m.cache->page_bytes()), m.backend->times, m.runs);
  }
  return plan.split.choice;
}

CooperativeStep::Times CooperativeStep::last_times() const { return impl_->backend->times; }

const CooperativeRates& CooperativeStep::rates() const { return *impl_->options.rates; }

CooperativeSplit CooperativeStep::plan(std::int64_t seq) const {
  const Impl& m = *impl_;
  (void)m.cache->length(seq);  // the sequence id
  const TensorView q = make_tensor(nullptr, m.cache->config().dtype, {1, m.seqlen_q, m.num_heads, m.cache->config().head_dim},
                                   m.cache->config().device);
  return coop::make_step_plan(q, *m.cache, seq, m.options).split;
}

CooperativeSplit plan_cooperative_attention(const TensorView& q, const CooperativeKVCache& cache, std::int64_t seq,
                                            const CooperativeOptions& options) {
  check_call(q, cache, seq, nullptr, nullptr, nullptr, options);
  return coop::make_step_plan(q, cache, seq, options).split;
}

KernelChoice cooperative_attention(const TensorView& q, const CooperativeKVCache& cache, std::int64_t seq,
                                   const TensorView& out, const std::optional<TensorView>& lse,
                                   const std::optional<CooperativeNewKV>& new_kv, const CooperativeOptions& options) {
  return CooperativeStep(q, cache, options).run(q, seq, out, lse, new_kv);
}

}  // namespace fastattn
