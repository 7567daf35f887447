// step_cpu.cpp — the cooperative step in the CPU emulation (a cache whose device is the CPU):
// the same parts, chunks, staging buffers and merge order as the CUDA step (step_cuda.cu), with
// the "GPU" parts run by the CPU kernels one after another. It is what the CPU tests check the
// split's exactness and the merge path with; the CPU part (part 3) is the very call the CUDA step
// runs on its host threads (run_cpu_part).
#include <cmath>
#include <cstring>
#include <vector>

#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"
#include "fastattn/kv_cache.hpp"

namespace fastattn::coop {

namespace {

AttentionOptions part_options(const CooperativeOptions& options) {
  AttentionOptions a = options.attention;
  a.causal = false;  // cached tokens are all visible to the step's queries
  a.backend = Backend::cpu;
  a.num_threads = options.cpu_threads;
  a.cuda_stream = nullptr;
  a.workspace = nullptr;
  return a;
}

}  // namespace

// Part 3 (and the emulation's part 1): attention of q over `pages` of a paged host pool, into
// out_part [1, seqlen_q, heads, d] (q's dtype) and lse_part f32 [1, heads, seqlen_q].
void run_paged_part_cpu(const TensorView& q, const TensorView& pool_k, const TensorView& pool_v,
                        const PartPages& pages, void* out_part, float* lse_part, const CooperativeOptions& options) {
  std::int32_t seqlen = static_cast<std::int32_t>(pages.tokens);
  const std::int64_t n = static_cast<std::int64_t>(pages.local.size());
  KVCache cache;
  cache.k = pool_k;
  cache.v = pool_v;
  cache.seqlens = make_tensor(&seqlen, DType::i32, {1});
  cache.block_table = make_tensor(const_cast<std::int32_t*>(pages.local.data()), DType::i32, {1, n});
  const TensorView out = make_tensor(out_part, q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]});
  const TensorView lse = make_tensor(lse_part, DType::f32, {1, q.shape[2], q.shape[1]});
  TensorView qc = q;
  qc.device = Device::cpu();
  attention_with_kv_cache(qc, cache, out, lse, std::nullopt, part_options(options));
}

void run_step_cpu(const StepPlan& plan, const TensorView& q, const CooperativeKVCache& cache, const TensorView& out,
                  const TensorView* lse, const CooperativeNewKV* new_kv, const CooperativeOptions& options) {
  const std::int64_t rows = plan.seqlen_q * plan.num_heads;
  const std::size_t esize = dtype_size(q.dtype);
  std::vector<float> acc(static_cast<std::size_t>(rows * plan.head_dim), 0.0f);
  std::vector<float> acc_lse(static_cast<std::size_t>(rows), -INFINITY);
  std::vector<unsigned char> part(static_cast<std::size_t>(rows * plan.head_dim) * esize);
  std::vector<float> part_lse(static_cast<std::size_t>(rows));
  auto add = [&] {
    accumulate_partial_cpu(acc.data(), acc_lse.data(), part.data(), q.dtype, part_lse.data(), plan.seqlen_q,
                           plan.num_heads, plan.head_dim);
  };
  // Part 1: the device pages (here: the CPU pool standing in for device memory).
  if (plan.run_device && !plan.device.local.empty()) {
    run_paged_part_cpu(q, cache.pool_k(PageTier::device), cache.pool_v(PageTier::device), plan.device, part.data(),
                       part_lse.data(), options);
    add();
  }
  // Part 2: host pages copied chunk by chunk into the two staging buffers (contiguous
  // [tokens, kv_heads, d]), then attended as a contiguous one-sequence cache.
  if (plan.run_streamed) {
    const std::size_t half_page = cache.page_bytes() / 2;
    const std::size_t token_bytes = half_page / static_cast<std::size_t>(cache.config().page_size);
    const TensorView host_k = cache.pool_k(PageTier::host);
    const TensorView host_v = cache.pool_v(PageTier::host);
    for (std::size_t i = 0; i < plan.chunks.size(); ++i) {
      const StreamChunk& chunk = plan.chunks[i];
      const int buffer = static_cast<int>(i % 2);
      TensorView sk = cache.staging(buffer, false);
      TensorView sv = cache.staging(buffer, true);
      std::size_t at = 0;
      for (std::size_t j = 0; j < chunk.local.size(); ++j) {
        const std::size_t bytes = static_cast<std::size_t>(chunk.tokens[j]) * token_bytes;
        const std::size_t from = static_cast<std::size_t>(chunk.local[j]) * half_page;
        std::memcpy(static_cast<char*>(sk.data) + at, static_cast<const char*>(host_k.data) + from, bytes);
        std::memcpy(static_cast<char*>(sv.data) + at, static_cast<const char*>(host_v.data) + from, bytes);
        at += bytes;
      }
      std::int32_t seqlen = static_cast<std::int32_t>(chunk.total);
      KVCache staged;
      staged.k = make_tensor(sk.data, sk.dtype, {1, sk.shape[0], sk.shape[1], sk.shape[2]});
      staged.v = make_tensor(sv.data, sv.dtype, {1, sv.shape[0], sv.shape[1], sv.shape[2]});
      staged.seqlens = make_tensor(&seqlen, DType::i32, {1});
      const TensorView o = make_tensor(part.data(), q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]});
      const TensorView l = make_tensor(part_lse.data(), DType::f32, {1, q.shape[2], q.shape[1]});
      attention_with_kv_cache(q, staged, o, l, std::nullopt, part_options(options));
      add();
    }
  }
  // Part 3: the CPU over its host pages.
  if (plan.run_cpu && !plan.cpu.local.empty()) {
    run_paged_part_cpu(q, cache.pool_k(PageTier::host), cache.pool_v(PageTier::host), plan.cpu, part.data(),
                       part_lse.data(), options);
    add();
  }
  // The step's new tokens, causal among themselves when asked.
  if (new_kv != nullptr && new_kv->k.shape[1] > 0) {
    AttentionOptions a = part_options(options);
    a.causal = options.attention.causal;
    const TensorView o = make_tensor(part.data(), q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]});
    const TensorView l = make_tensor(part_lse.data(), DType::f32, {1, q.shape[2], q.shape[1]});
    forward(q, new_kv->k, new_kv->v, o, l, a);
    add();
  }
  finish_partials_cpu(acc.data(), acc_lse.data(), out, lse, plan.seqlen_q, plan.num_heads, plan.head_dim);
}

}  // namespace fastattn::coop
