// step_cpu.cpp — the cooperative step in the CPU emulation (a cache whose device is the CPU):
// the same parts, chunks, staging buffers, partial runners and merge order as the CUDA step
// (step_cuda.cu), with the "GPU" parts run by the CPU kernels one after another; for prefill
// (CooperativeKernel::forward) parts 1 and 2 call forward() over each run of consecutive device
// pages and each staged chunk, as the CUDA step does. It is what the
// CPU tests check the split's exactness, the merge path and the step object's reuse with; the
// CPU part (part 3) is the very runner the CUDA step runs on its host thread.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"

namespace fastattn::coop {

namespace {

class CpuStep final : public StepBackend {
 public:
  CpuStep(const TensorView& q, const CooperativeKVCache& cache, const CooperativeOptions& options) : cache_(cache) {
    TensorView qc = q;
    qc.device = Device::cpu();
    const std::int64_t rows = q.shape[1] * q.shape[2], d = cache.config().head_dim;
    acc_.resize(static_cast<std::size_t>(rows * d));
    acc_lse_.resize(static_cast<std::size_t>(rows));
    part_.resize(static_cast<std::size_t>(rows * d));
    part_lse_.resize(static_cast<std::size_t>(rows));
    device_table_.assign(static_cast<std::size_t>(cache.device_pages()), 0);
    host_table_.assign(static_cast<std::size_t>(cache.host_pages()), 0);
    const AttentionOptions a = part_options(options, Backend::cpu);
    forward_ = cooperative_gpu_kernel(q.shape[1]) == CooperativeKernel::forward;
    if (cache.device_pages() > 0 && !forward_) {
      device_ = plan_part(qc, paged_part_view(cache, PageTier::device, device_table_.data(), &seqlen_, Device::cpu()), a);
    }
    if (cache.host_pages() > 0) {
      if (!forward_) staged_ = plan_part(qc, staged_part_view(cache, 0, &seqlen_), a);
      cpu_ = plan_part(qc, paged_part_view(cache, PageTier::host, host_table_.data(), &seqlen_, Device::cpu()), a);
    }
  }

  void run(const StepPlan& plan, const TensorView& q, const TensorView& out, const TensorView* lse,
           const CooperativeNewKV* new_kv, const CooperativeOptions& options) override {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point run_start = Clock::now();
    times = {};
    std::fill(acc_.begin(), acc_.end(), 0.0f);
    std::fill(acc_lse_.begin(), acc_lse_.end(), -INFINITY);
    TensorView qc = q;
    qc.device = Device::cpu();
    // Each part's partial, f32 where its kernel writes f32 (PartialRunner::out_dtype).
    auto run_part = [&](const PartialRunner& runner, const KVCache& kv) {
      runner.run(qc, kv, part_.data(), part_lse_.data(), nullptr);
      accumulate_partial_cpu(acc_.data(), acc_lse_.data(), part_.data(), runner.out_dtype(), part_lse_.data(),
                             plan.seqlen_q, plan.num_heads, plan.head_dim);
    };
    // Prefill's "GPU" parts: forward() over contiguous keys, out in q's dtype.
    const AttentionOptions fa = part_options(options, Backend::cpu);
    auto forward_part_cpu = [&](const TensorView& k, const TensorView& v) {
      TensorView kc = k, vc = v;
      kc.device = vc.device = Device::cpu();
      forward_part(qc, kc, vc, part_.data(), part_lse_.data(), fa);
      accumulate_partial_cpu(acc_.data(), acc_lse_.data(), part_.data(), q.dtype, part_lse_.data(), plan.seqlen_q,
                             plan.num_heads, plan.head_dim);
    };
    // Part 1: the device pages (here: the CPU pool standing in for device memory).
    if (plan.run_device && forward_) {
      for (const DeviceRun& run : plan.device_runs) {
        forward_part_cpu(pool_run_view(cache_, PageTier::device, false, run.first, run.tokens),
                         pool_run_view(cache_, PageTier::device, true, run.first, run.tokens));
      }
    } else if (plan.run_device && !plan.device.local.empty()) {
      std::copy(plan.device.local.begin(), plan.device.local.end(), device_table_.begin());
      seqlen_ = static_cast<std::int32_t>(plan.device.tokens);
      run_part(device_, paged_part_view(cache_, PageTier::device, device_table_.data(), &seqlen_, Device::cpu()));
    }
    // Part 2: host pages copied chunk by chunk into the two staging buffers (contiguous
    // [tokens, kv_heads, d]), then attended as a contiguous one-sequence cache.
    if (plan.run_streamed && !plan.chunks.empty()) {
      const std::size_t half_page = cache_.page_bytes() / 2;
      const std::size_t token_bytes = half_page / static_cast<std::size_t>(cache_.config().page_size);
      const char* host_k = static_cast<const char*>(cache_.pool_k(PageTier::host).data);
      const char* host_v = static_cast<const char*>(cache_.pool_v(PageTier::host).data);
      for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
        const StreamChunk& chunk = plan.chunks[i];
        const KVCache kv = staged_part_view(cache_, static_cast<int>(i % 2), &seqlen_);
        std::size_t at = 0;
        for (std::size_t j = 0; j < chunk.local.size(); ++j) {
          const std::size_t bytes = static_cast<std::size_t>(chunk.tokens[j]) * token_bytes;
          const std::size_t from = static_cast<std::size_t>(chunk.local[j]) * half_page;
          std::memcpy(static_cast<char*>(kv.k.data) + at, host_k + from, bytes);
          std::memcpy(static_cast<char*>(kv.v.data) + at, host_v + from, bytes);
          at += bytes;
        }
        seqlen_ = static_cast<std::int32_t>(chunk.total);
        if (forward_) {
          const int b = static_cast<int>(i % 2);
          forward_part_cpu(staged_run_view(cache_, b, false, chunk.total), staged_run_view(cache_, b, true, chunk.total));
        } else {
          run_part(staged_, kv);
        }
      }
    }
    // Part 3: the CPU over its host pages (the "GPU" parts above ran first, one after the other).
    const Clock::time_point cpu_start = Clock::now();
    if (plan.run_device || plan.run_streamed) times.gpu_s = std::chrono::duration<double>(cpu_start - run_start).count();
    if (plan.run_cpu && !plan.cpu.local.empty()) {
      std::copy(plan.cpu.local.begin(), plan.cpu.local.end(), host_table_.begin());
      seqlen_ = static_cast<std::int32_t>(plan.cpu.tokens);
      run_part(cpu_, paged_part_view(cache_, PageTier::host, host_table_.data(), &seqlen_, Device::cpu()));
      times.cpu_s = std::chrono::duration<double>(Clock::now() - cpu_start).count();
    }
    // The step's new tokens, causal among themselves when asked: forward() writes q's dtype.
    if (new_kv != nullptr && new_kv->k.shape[1] > 0) {
      AttentionOptions an = part_options(options, Backend::cpu);
      an.causal = options.attention.causal;
      const TensorView o = make_tensor(part_.data(), q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]});
      const TensorView l = make_tensor(part_lse_.data(), DType::f32, {1, q.shape[2], q.shape[1]});
      forward(qc, new_kv->k, new_kv->v, o, l, an);
      accumulate_partial_cpu(acc_.data(), acc_lse_.data(), part_.data(), q.dtype, part_lse_.data(), plan.seqlen_q,
                             plan.num_heads, plan.head_dim);
    }
    finish_partials_cpu(acc_.data(), acc_lse_.data(), out, lse, plan.seqlen_q, plan.num_heads, plan.head_dim);
    times.step_s = std::chrono::duration<double>(Clock::now() - run_start).count();
  }

 private:
  const CooperativeKVCache& cache_;
  std::vector<float> acc_, acc_lse_, part_, part_lse_;
  std::vector<std::int32_t> device_table_, host_table_;  // the parts' block tables [1, pool pages]
  std::int32_t seqlen_ = 0;                              // the running part's length
  bool forward_ = false;  // prefill: parts 1 and 2 call forward() (CooperativeKernel::forward)
  PartialRunner device_, staged_, cpu_;
};

}  // namespace

std::unique_ptr<StepBackend> make_step_cpu(const TensorView& q, const CooperativeKVCache& cache,
                                           const CooperativeOptions& options) {
  return std::make_unique<CpuStep>(q, cache, options);
}

}  // namespace fastattn::coop
