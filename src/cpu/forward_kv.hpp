// forward_kv.hpp — K and V as the CPU forward reads them: f32 rows, head_dim floats apart.
//
// The caller's K/V rows of one head are a token stride apart (num_kv_heads * head_dim
// elements, typically 4 KiB or more), so every row of a K/V tile sits on its own page. Each
// work unit reads all keys of its head, and on a virtual machine with nested paging each such
// row costs a page walk of hundreds of cycles (measured: strided re-reads of one head's K/V ran
// at 1.5-3 GB/s versus 40 GB/s contiguous from L3). So the kernel first copies K and V, per KV
// head, into contiguous f32 rows (converting f16/bf16 once instead of once per work unit):
//   packed K, V: (heads of this chunk, tokens, head_dim) f32, tokens = total_k
// and tiles are then read in place. f32 inputs whose rows are already head_dim apart (one KV
// head, or a [batch, heads, seqlen, head_dim] view) are read directly, with no copy.
// To bound memory the copy covers a chunk of KV heads at a time (at least one head).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/problem.hpp"
#include "cpu/simd.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

constexpr std::size_t element_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }

// Where the rows of KV heads [head_begin, head_end) live: row (b, t, kv_head) of K starts at
// k + p.offset_k(k_rows, b, t, kv_head - head_begin), likewise for V. Consecutive tokens of a
// head are head_dim floats apart.
struct KvRows {
  const float* k = nullptr;
  const float* v = nullptr;
  Operand k_rows{};  // data unused; strides in floats
  Operand v_rows{};
  std::int64_t head_begin = 0;
  std::int64_t head_end = 0;

  const float* k_row(const AttentionProblem& p, std::int64_t b, std::int64_t t,
                     std::int64_t kv_head) const {
    return k + p.offset_k(k_rows, b, t, kv_head - head_begin);
  }
  const float* v_row(const AttentionProblem& p, std::int64_t b, std::int64_t t,
                     std::int64_t kv_head) const {
    return v + p.offset_k(v_rows, b, t, kv_head - head_begin);
  }
};

// KV heads copied at a time: as many as fit in 256 MiB, at least one, at most all.
inline std::int64_t kv_heads_per_chunk(std::size_t head_bytes, std::int64_t num_kv_heads) {
  constexpr std::size_t kChunkBudgetBytes = std::size_t{256} << 20;
  std::int64_t heads = num_kv_heads;
  if (head_bytes > 0) heads = static_cast<std::int64_t>(kChunkBudgetBytes / head_bytes);
  if (heads < 1) heads = 1;
  if (heads > num_kv_heads) heads = num_kv_heads;
  return heads;
}

// How the call reads K and V: in place, or copied chunk by chunk.
struct KvPlan {
  bool in_place = false;
  std::int64_t heads_per_chunk = 0;
  std::size_t chunk_bytes = 0;  // packed K and V of one chunk

  explicit KvPlan(const AttentionProblem& p) {
    const std::int64_t d = p.head_dim;
    in_place = p.dtype == DType::f32 && p.k.stride.token == d && p.v.stride.token == d;
    if (in_place) {
      heads_per_chunk = p.num_kv_heads;
      return;
    }
    const std::size_t head_bytes = static_cast<std::size_t>(p.total_k * d) * sizeof(float) * 2;
    heads_per_chunk = kv_heads_per_chunk(head_bytes, p.num_kv_heads);
    chunk_bytes = head_bytes * static_cast<std::size_t>(heads_per_chunk);
  }
};

// The rows of K and V for the in-place case.
inline KvRows kv_in_place(const AttentionProblem& p) {
  KvRows r;
  r.k = static_cast<const float*>(p.k.data);
  r.v = static_cast<const float*>(p.v.data);
  r.k_rows = p.k;
  r.v_rows = p.v;
  r.head_begin = 0;
  r.head_end = p.num_kv_heads;
  return r;
}

// Copies K and V of KV heads [head_begin, head_end) into packed (f32, see the file comment)
// and returns where their rows are. Called by every thread of a parallel region: the copy is
// an orphaned `omp for` over tokens, reading each token's heads in memory order, and ends in
// the loop's barrier.
template <class V>
KvRows pack_kv_heads(const AttentionProblem& p, std::int64_t head_begin, std::int64_t head_end,
                     float* packed) {
  const std::int64_t d = p.head_dim;
  const std::int64_t tokens = p.total_k;
  const std::int64_t heads = head_end - head_begin;
  const std::size_t elem = element_bytes(p.dtype);
  float* k_dst = packed;
  float* v_dst = packed + heads * tokens * d;
  const char* k_src = static_cast<const char*>(p.k.data);
  const char* v_src = static_cast<const char*>(p.v.data);
  const std::int64_t seqlen_k = p.seqlen_k;
  const bool varlen = p.is_varlen();
#pragma omp for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    // Element offset of global token t (varlen: t indexes the concatenated sequences).
    const std::int64_t b = varlen || seqlen_k == 0 ? 0 : t / seqlen_k;
    const std::int64_t tk = varlen || seqlen_k == 0 ? t : t % seqlen_k;
    const std::int64_t k_token = varlen ? t * p.k.stride.token
                                        : b * p.k.stride.batch + tk * p.k.stride.token;
    const std::int64_t v_token = varlen ? t * p.v.stride.token
                                        : b * p.v.stride.batch + tk * p.v.stride.token;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kh = head_begin + h;
      const std::size_t k_off = static_cast<std::size_t>(k_token + kh * p.k.stride.head) * elem;
      const std::size_t v_off = static_cast<std::size_t>(v_token + kh * p.v.stride.head) * elem;
      simd::load_row<V>(k_src + k_off, p.dtype, d, 1.0f, k_dst + (h * tokens + t) * d);
      simd::load_row<V>(v_src + v_off, p.dtype, d, 1.0f, v_dst + (h * tokens + t) * d);
    }
  }
  KvRows r;
  r.k = k_dst;
  r.v = v_dst;
  // Packed rows: token stride d, head stride tokens * d; padded batches keep seqlen_k tokens
  // per sequence (offset_k adds b * batch), varlen ones use the global token index.
  r.k_rows.stride.token = d;
  r.k_rows.stride.head = tokens * d;
  r.k_rows.stride.batch = seqlen_k * d;
  r.v_rows = r.k_rows;
  r.head_begin = head_begin;
  r.head_end = head_end;
  return r;
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
