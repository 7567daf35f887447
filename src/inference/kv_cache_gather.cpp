// kv_cache_gather.cpp — see kv_cache_gather.hpp.
#include "inference/kv_cache_gather.hpp"

#include <algorithm>
#include <cstring>

#include "common/dtype.hpp"
#include "reference/reference.hpp"

namespace fastattn {
namespace {

// Element offset of cache token t (head 0) of sequence b; the page clamped like the kernels'.
std::int64_t cache_row(const KVCacheProblem& p, std::int64_t page_stride, std::int64_t token_stride, std::int64_t b,
                       std::int64_t t) {
  std::int64_t page = b;
  if (p.is_paged()) {
    page = std::clamp<std::int64_t>(p.block_table[b * p.block_table_stride + t / p.page_size], 0, p.num_pages - 1);
  }
  return page * page_stride + (t % p.page_size) * token_stride;
}

// Copies head_dim elements of each KV head of one token into dst ([num_kv_heads, head_dim]).
void copy_token(const KVCacheProblem& p, const void* base, std::int64_t row, std::int64_t head_stride,
                unsigned char* dst) {
  const std::size_t elem = dtype_size(p.attn.dtype);
  const std::size_t bytes = static_cast<std::size_t>(p.attn.head_dim) * elem;
  for (std::int64_t h = 0; h < p.attn.num_kv_heads; ++h) {
    std::memcpy(dst + static_cast<std::size_t>(h) * bytes,
                static_cast<const unsigned char*>(base) + static_cast<std::size_t>(row + h * head_stride) * elem, bytes);
  }
}

}  // namespace

GatheredKVCache gather_kv_cache(const KVCacheProblem& p) {
  const AttentionProblem& a = p.attn;
  GatheredKVCache g;
  const std::size_t elem = dtype_size(a.dtype);
  const std::int64_t capacity = (p.is_paged() && p.num_pages < 1) ? 0 : p.capacity();
  const std::size_t q_token_bytes = static_cast<std::size_t>(a.num_heads * a.head_dim) * elem;
  const std::size_t k_token_bytes = static_cast<std::size_t>(a.num_kv_heads * a.head_dim) * elem;

  // Lengths: cached tokens, then appended ones, within the capacity.
  std::vector<std::int64_t> cached(static_cast<std::size_t>(a.batch)), added(cached.size());
  g.cu_seqlens_q.assign(static_cast<std::size_t>(a.batch + 1), 0);
  g.cu_seqlens_k.assign(static_cast<std::size_t>(a.batch + 1), 0);
  for (std::int64_t b = 0; b < a.batch; ++b) {
    const auto i = static_cast<std::size_t>(b);
    cached[i] = std::clamp<std::int64_t>(p.seqlens[b], 0, capacity);
    added[i] = std::clamp<std::int64_t>(p.seqlens[b] + p.seqlen_new, 0, capacity) - cached[i];
    g.cu_seqlens_q[i + 1] = static_cast<std::int32_t>((b + 1) * a.seqlen_q);
    g.cu_seqlens_k[i + 1] = static_cast<std::int32_t>(g.cu_seqlens_k[i] + cached[i] + added[i]);
  }
  const std::int64_t total_k = g.cu_seqlens_k.back();
  g.q.resize(static_cast<std::size_t>(a.total_q) * q_token_bytes);
  g.k.resize(static_cast<std::size_t>(total_k) * k_token_bytes);
  g.v.resize(g.k.size());

  for (std::int64_t b = 0; b < a.batch; ++b) {
    const std::size_t row_bytes = static_cast<std::size_t>(a.head_dim) * elem;
    for (std::int64_t t = 0; t < a.seqlen_q; ++t) {
      for (std::int64_t h = 0; h < a.num_heads; ++h) {
        std::memcpy(g.q.data() + static_cast<std::size_t>((b * a.seqlen_q + t) * a.num_heads + h) * row_bytes,
                    static_cast<const unsigned char*>(a.q.data) + static_cast<std::size_t>(a.offset_q(a.q, b, t, h)) * elem,
                    row_bytes);
      }
    }
    const auto i = static_cast<std::size_t>(b);
    for (std::int64_t t = 0; t < cached[i] + added[i]; ++t) {
      const std::size_t at = static_cast<std::size_t>(g.cu_seqlens_k[i] + t) * k_token_bytes;
      if (t < cached[i]) {
        copy_token(p, a.k.data, cache_row(p, p.k_page_stride, a.k.stride.token, b, t), a.k.stride.head, g.k.data() + at);
        copy_token(p, a.v.data, cache_row(p, p.v_page_stride, a.v.stride.token, b, t), a.v.stride.head, g.v.data() + at);
      } else {
        const std::int64_t n = t - cached[i];
        copy_token(p, p.k_new.data, b * p.k_new.stride.batch + n * p.k_new.stride.token, p.k_new.stride.head, g.k.data() + at);
        copy_token(p, p.v_new.data, b * p.v_new.stride.batch + n * p.v_new.stride.token, p.v_new.stride.head, g.v.data() + at);
      }
    }
  }

  AttentionProblem& r = g.problem;
  r = a;
  r.seqlen_k = 0;
  for (std::int64_t b = 0; b < a.batch; ++b) {
    r.seqlen_k = std::max<std::int64_t>(r.seqlen_k, g.cu_seqlens_k[static_cast<std::size_t>(b + 1)] - g.cu_seqlens_k[static_cast<std::size_t>(b)]);
  }
  r.total_k = total_k;
  r.cu_seqlens_q = g.cu_seqlens_q.data();
  r.cu_seqlens_k = g.cu_seqlens_k.data();
  const std::int64_t kv_token = a.num_kv_heads * a.head_dim, q_token = a.num_heads * a.head_dim;
  r.q = {g.q.data(), {0, q_token, a.head_dim}};
  r.k = {g.k.data(), {0, kv_token, a.head_dim}};
  r.v = {g.v.data(), {0, kv_token, a.head_dim}};
  r.out = {};
  r.lse = nullptr;
  r.lse_batch_stride = 0;
  r.lse_head_stride = a.total_q;
  r.lse_token_stride = 1;
  r.workspace = nullptr;
  return g;
}

void kv_cache_reference(const KVCacheProblem& p) {
  const AttentionProblem& a = p.attn;
  if (a.total_q == 0) return;
  const GatheredKVCache g = gather_kv_cache(p);
  const reference::ForwardResult r = reference::forward_f64(g.problem);
  for (std::int64_t b = 0; b < a.batch; ++b) {
    for (std::int64_t t = 0; t < a.seqlen_q; ++t) {
      const std::int64_t row = b * a.seqlen_q + t;
      for (std::int64_t h = 0; h < a.num_heads; ++h) {
        const std::int64_t out_at = a.offset_q(a.out, b, t, h);
        for (std::int64_t c = 0; c < a.head_dim; ++c) {
          store_element(a.out.data, a.dtype, out_at + c, r.out[static_cast<std::size_t>((row * a.num_heads + h) * a.head_dim + c)]);
        }
        if (a.lse) a.lse_row(b, h)[t * a.lse_token_stride] = static_cast<float>(r.lse[static_cast<std::size_t>(h * a.total_q + row)]);
      }
    }
  }
}

}  // namespace fastattn
