// kv_cache.cpp — see kv_cache.hpp.
#include "cpu/kv_cache.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/mask.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/decode_keys.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {
namespace {

int thread_count(const AttentionProblem& p, int threads) {
  if (p.num_threads > 0) return p.num_threads;
  return threads > 0 ? threads : omp_get_max_threads();
}

}  // namespace

void kv_cache_append(const KVCacheProblem& p, int threads) {
  const AttentionProblem& a = p.attn;
  if (p.seqlen_new == 0 || a.batch == 0) return;
  const std::size_t elem = dtype_size(a.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(a.head_dim) * elem;
  const std::int64_t capacity = p.capacity(), rows = a.batch * p.seqlen_new;
  auto* k = static_cast<unsigned char*>(a.k.data);
  auto* v = static_cast<unsigned char*>(a.v.data);
  const auto* k_new = static_cast<const unsigned char*>(p.k_new.data);
  const auto* v_new = static_cast<const unsigned char*>(p.v_new.data);
#pragma omp parallel for num_threads(thread_count(a, threads)) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t b = r / p.seqlen_new, i = r % p.seqlen_new;
    const std::int64_t t = static_cast<std::int64_t>(p.seqlens[b]) + i;
    if (t < 0 || t >= capacity) continue;
    std::int64_t page = b;
    if (p.is_paged()) {
      page = p.block_table[b * p.block_table_stride + t / p.page_size];
      if (page < 0 || page >= p.num_pages) continue;
    }
    const std::int64_t in_page = t % p.page_size;
    for (std::int64_t h = 0; h < a.num_kv_heads; ++h) {
      const std::int64_t k_at = page * p.k_page_stride + in_page * a.k.stride.token + h * a.k.stride.head;
      const std::int64_t v_at = page * p.v_page_stride + in_page * a.v.stride.token + h * a.v.stride.head;
      const std::int64_t kn_at = b * p.k_new.stride.batch + i * p.k_new.stride.token + h * p.k_new.stride.head;
      const std::int64_t vn_at = b * p.v_new.stride.batch + i * p.v_new.stride.token + h * p.v_new.stride.head;
      std::memcpy(k + static_cast<std::size_t>(k_at) * elem, k_new + static_cast<std::size_t>(kn_at) * elem, row_bytes);
      std::memcpy(v + static_cast<std::size_t>(v_at) * elem, v_new + static_cast<std::size_t>(vn_at) * elem, row_bytes);
    }
  }
}

std::int64_t kv_cache_first_visible(const KVCacheProblem& p, std::int64_t len) {
  if (p.attn.seqlen_q == 0) return len;
  return p.attn.mask_for(p.attn.seqlen_q, len).key_begin(0);
}

std::size_t kv_cache_gather_bytes(const KVCacheProblem& p, std::int64_t max_len) {
  if (!p.is_paged()) return 0;
  const AttentionProblem& a = p.attn;
  // A bounded window shows at most seqlen_q + window_left keys of the end of the cache.
  std::int64_t tokens = std::min(max_len, p.capacity());
  if (a.window_left >= 0) tokens = std::min(tokens, a.seqlen_q + a.window_left);
  const std::size_t token_bytes = static_cast<std::size_t>(a.num_kv_heads * a.head_dim) * dtype_size(a.dtype);
  return (2 * static_cast<std::size_t>(std::max<std::int64_t>(tokens, 0)) * token_bytes + 63) / 64 * 64;
}

void kv_cache_gather_forward(const KVCacheProblem& p, const CpuKernelPlan& forward_plan, void* gather,
                             std::size_t gather_bytes) {
  const AttentionProblem& a = p.attn;
  if (a.total_q == 0) return;
  const DecodeKeys cache = DecodeKeys::of(p);
  const std::size_t elem = dtype_size(a.dtype);
  const std::int64_t token_elems = a.num_kv_heads * a.head_dim;
  const std::size_t row_bytes = static_cast<std::size_t>(a.head_dim) * elem;
  const int threads = thread_count(a, forward_plan.num_threads);
  for (std::int64_t b = 0; b < a.batch; ++b) {
    const SequenceKeys keys(a, &cache, b);
    const std::int64_t len = keys.length(), first = kv_cache_first_visible(p, len), n = len - first;
    AttentionProblem s = a;  // sequence b alone: batch 1, its visible keys
    s.batch = 1;
    s.total_q = a.seqlen_q;
    s.seqlen_k = s.total_k = n;
    s.q.data = static_cast<unsigned char*>(a.q.data) + static_cast<std::size_t>(b * a.q.stride.batch) * elem;
    s.out.data = static_cast<unsigned char*>(a.out.data) + static_cast<std::size_t>(b * a.out.stride.batch) * elem;
    if (a.lse) s.lse = a.lse + b * a.lse_batch_stride;
    if (!p.is_paged()) {  // the sequence's page is the whole cache row: read in place
      s.k.data = static_cast<unsigned char*>(a.k.data) + static_cast<std::size_t>(b * p.k_page_stride + first * a.k.stride.token) * elem;
      s.v.data = static_cast<unsigned char*>(a.v.data) + static_cast<std::size_t>(b * p.v_page_stride + first * a.v.stride.token) * elem;
    } else {
      const std::size_t half = static_cast<std::size_t>(n * token_elems) * elem;
      if (2 * half > gather_bytes) {
        throw Error(ErrorCode::internal, "cpu kv_cache: gather scratch of " + std::to_string(gather_bytes) +
                                             " bytes for " + std::to_string(n) + " keys");
      }
      auto* gk = static_cast<unsigned char*>(gather);
      unsigned char* gv = gk + half;
      const auto* k = static_cast<const unsigned char*>(a.k.data);
      const auto* v = static_cast<const unsigned char*>(a.v.data);
      const std::int64_t blocks = (n + kDecodeMaxBlockK - 1) / kDecodeMaxBlockK;
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t blk = 0; blk < blocks; ++blk) {
        std::int64_t k_off[kDecodeMaxBlockK], v_off[kDecodeMaxBlockK];
        const std::int64_t t0 = blk * kDecodeMaxBlockK, rows = std::min(kDecodeMaxBlockK, n - t0);
        keys.rows(first + t0, rows, k_off, v_off);
        for (std::int64_t j = 0; j < rows; ++j) {
          for (std::int64_t h = 0; h < a.num_kv_heads; ++h) {
            const std::size_t at = static_cast<std::size_t>((t0 + j) * token_elems + h * a.head_dim) * elem;
            std::memcpy(gk + at, k + static_cast<std::size_t>(k_off[j] + h * a.k.stride.head) * elem, row_bytes);
            std::memcpy(gv + at, v + static_cast<std::size_t>(v_off[j] + h * a.v.stride.head) * elem, row_bytes);
          }
        }
      }
      s.k = {gk, {n * token_elems, token_elems, a.head_dim}};
      s.v = {gv, {n * token_elems, token_elems, a.head_dim}};
    }
    forward(s, forward_plan);
  }
}

}  // namespace fastattn::cpu
