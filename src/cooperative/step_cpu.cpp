// step_cpu.cpp — the cooperative step in the CPU emulation (a cache whose device is the CPU):
// the same parts, chunks, staging buffers, partial runners and merge order as the CUDA step
// (step_cuda.cu), with the "GPU" parts run by the CPU kernels one after another. It is what the
// CPU tests check the split's exactness and the merge path with; the CPU part (part 3) is the
// very runner the CUDA step runs on its host thread.
#include <cmath>
#include <cstring>
#include <vector>

#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"

namespace fastattn::coop {

void run_step_cpu(const StepPlan& plan, const TensorView& q, const CooperativeKVCache& cache, const TensorView& out,
                  const TensorView* lse, const CooperativeNewKV* new_kv, const CooperativeOptions& options) {
  const std::int64_t rows = plan.seqlen_q * plan.num_heads;
  const AttentionOptions a = part_options(options, Backend::cpu);
  // Each part's partial, f32 where its kernel writes f32 (PartialRunner::out_dtype), else q's dtype.
  std::vector<float> acc(static_cast<std::size_t>(rows * plan.head_dim), 0.0f);
  std::vector<float> acc_lse(static_cast<std::size_t>(rows), -INFINITY);
  std::vector<float> part(static_cast<std::size_t>(rows * plan.head_dim));
  std::vector<float> part_lse(static_cast<std::size_t>(rows));
  auto add = [&](DType dtype) {
    accumulate_partial_cpu(acc.data(), acc_lse.data(), part.data(), dtype, part_lse.data(), plan.seqlen_q,
                           plan.num_heads, plan.head_dim);
  };
  TensorView qc = q;
  qc.device = Device::cpu();
  // Part 1: the device pages (here: the CPU pool standing in for device memory).
  if (plan.run_device && !plan.device.local.empty()) {
    std::vector<std::int32_t> table(static_cast<std::size_t>(cache.device_pages()), 0);
    std::copy(plan.device.local.begin(), plan.device.local.end(), table.begin());
    std::int32_t seqlen = static_cast<std::int32_t>(plan.device.tokens);
    const KVCache kv = paged_part_view(cache, PageTier::device, table.data(), &seqlen, Device::cpu());
    const PartialRunner runner = plan_part(qc, kv, a);
    runner.run(qc, kv, part.data(), part_lse.data(), nullptr);
    add(runner.out_dtype());
  }
  // Part 2: host pages copied chunk by chunk into the two staging buffers (contiguous
  // [tokens, kv_heads, d]), then attended as a contiguous one-sequence cache.
  if (plan.run_streamed && !plan.chunks.empty()) {
    const std::size_t half_page = cache.page_bytes() / 2;
    const std::size_t token_bytes = half_page / static_cast<std::size_t>(cache.config().page_size);
    const TensorView host_k = cache.pool_k(PageTier::host);
    const TensorView host_v = cache.pool_v(PageTier::host);
    std::int32_t seqlen = 0;
    const PartialRunner runner = plan_part(qc, staged_part_view(cache, 0, &seqlen), a);
    for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
      const StreamChunk& chunk = plan.chunks[i];
      const int buffer = static_cast<int>(i % 2);
      const KVCache kv = staged_part_view(cache, buffer, &seqlen);
      std::size_t at = 0;
      for (std::size_t j = 0; j < chunk.local.size(); ++j) {
        const std::size_t bytes = static_cast<std::size_t>(chunk.tokens[j]) * token_bytes;
        const std::size_t from = static_cast<std::size_t>(chunk.local[j]) * half_page;
        std::memcpy(static_cast<char*>(kv.k.data) + at, static_cast<const char*>(host_k.data) + from, bytes);
        std::memcpy(static_cast<char*>(kv.v.data) + at, static_cast<const char*>(host_v.data) + from, bytes);
        at += bytes;
      }
      seqlen = static_cast<std::int32_t>(chunk.total);
      runner.run(qc, kv, part.data(), part_lse.data(), nullptr);
      add(runner.out_dtype());
    }
  }
  // Part 3: the CPU over its host pages.
  if (plan.run_cpu && !plan.cpu.local.empty()) {
    std::vector<std::int32_t> table(static_cast<std::size_t>(cache.host_pages()), 0);
    std::copy(plan.cpu.local.begin(), plan.cpu.local.end(), table.begin());
    std::int32_t seqlen = static_cast<std::int32_t>(plan.cpu.tokens);
    const KVCache kv = paged_part_view(cache, PageTier::host, table.data(), &seqlen, Device::cpu());
    const PartialRunner runner = plan_part(qc, kv, a);
    runner.run(qc, kv, part.data(), part_lse.data(), nullptr);
    add(runner.out_dtype());
  }
  // The step's new tokens, causal among themselves when asked: forward() writes q's dtype.
  if (new_kv != nullptr && new_kv->k.shape[1] > 0) {
    AttentionOptions an = a;
    an.causal = options.attention.causal;
    const TensorView o = make_tensor(part.data(), q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]});
    const TensorView l = make_tensor(part_lse.data(), DType::f32, {1, q.shape[2], q.shape[1]});
    forward(qc, new_kv->k, new_kv->v, o, l, an);
    add(q.dtype);
  }
  finish_partials_cpu(acc.data(), acc_lse.data(), out, lse, plan.seqlen_q, plan.num_heads, plan.head_dim);
}

}  // namespace fastattn::coop
