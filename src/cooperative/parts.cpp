// parts.cpp — the KV-cache views each part of the step attends (the device pool, a staging
// buffer, the host pool) and their PartialRunners, planned from shapes only (the pools' sizes,
// not the sequence's length), so a step object plans them once (cooperative_internal.hpp).
#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"

namespace fastattn::coop {

AttentionOptions part_options(const CooperativeOptions& options, Backend backend) {
  AttentionOptions a = options.attention;
  a.causal = false;  // cached tokens are all visible to the step's queries
  a.backend = backend;
  a.num_threads = options.cpu_threads;
  a.workspace = nullptr;
  if (backend == Backend::cpu) a.cuda_stream = nullptr;
  return a;
}

KVCache paged_part_view(const CooperativeKVCache& cache, PageTier tier, const std::int32_t* table,
                        const std::int32_t* seqlen, Device where) {
  const std::int64_t pages = tier == PageTier::device ? cache.device_pages() : cache.host_pages();
  KVCache kv;
  kv.k = cache.pool_k(tier);
  kv.v = cache.pool_v(tier);
  kv.seqlens = make_tensor(const_cast<std::int32_t*>(seqlen), DType::i32, {1}, where);
  kv.block_table = make_tensor(const_cast<std::int32_t*>(table), DType::i32, {1, pages}, where);
  return kv;
}

KVCache staged_part_view(const CooperativeKVCache& cache, int buffer, const std::int32_t* seqlen) {
  const Device where = cache.config().device;
  const TensorView k = cache.staging(buffer, false), v = cache.staging(buffer, true);
  KVCache kv;
  kv.k = make_tensor(k.data, k.dtype, {1, k.shape[0], k.shape[1], k.shape[2]}, where);
  kv.v = make_tensor(v.data, v.dtype, {1, v.shape[0], v.shape[1], v.shape[2]}, where);
  kv.seqlens = make_tensor(const_cast<std::int32_t*>(seqlen), DType::i32, {1}, where);
  return kv;
}

TensorView pool_run_view(const CooperativeKVCache& cache, PageTier tier, bool value, std::int32_t first,
                         std::int64_t tokens) {
  const TensorView pool = value ? cache.pool_v(tier) : cache.pool_k(tier);  // [pages, page_size, kvh, d]
  const std::int64_t token_elems = pool.shape[2] * pool.shape[3];
  char* base = static_cast<char*>(pool.data) +
               static_cast<std::size_t>(first) * static_cast<std::size_t>(pool.shape[1] * token_elems) * dtype_size(pool.dtype);
  return make_tensor(base, pool.dtype, {1, tokens, pool.shape[2], pool.shape[3]}, pool.device);
}

TensorView staged_run_view(const CooperativeKVCache& cache, int buffer, bool value, std::int64_t tokens) {
  const TensorView s = cache.staging(buffer, value);  // [staging tokens, kvh, d]
  return make_tensor(s.data, s.dtype, {1, tokens, s.shape[1], s.shape[2]}, cache.config().device);
}

void forward_part(const TensorView& q, const TensorView& k, const TensorView& v, void* out, float* lse,
                  const AttentionOptions& options) {
  const TensorView o = make_tensor(out, q.dtype, {1, q.shape[1], q.shape[2], q.shape[3]}, q.device);
  const TensorView l = make_tensor(lse, DType::f32, {1, q.shape[2], q.shape[1]}, q.device);
  (void)forward(q, k, v, o, l, options);
}

PartialRunner plan_part(const TensorView& q, const KVCache& kv, const AttentionOptions& options) {
  static float shape_only;  // a non-null lse address: the plans are made with_lse (no data read)
  const TensorView lse = make_tensor(&shape_only, DType::f32, {1, q.shape[2], q.shape[1]}, q.device);
  KVCacheShape shape = kv_cache_shape(q, kv, lse);
  // Split counts sized for the whole pool / buffer: the longest cache this part can show.
  shape.max_cache_len = kv.is_paged() ? shape.max_pages_per_seq * shape.page_size : shape.capacity;
  return PartialRunner(shape, options);
}

}  // namespace fastattn::coop
