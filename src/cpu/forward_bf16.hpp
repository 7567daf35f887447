// forward_bf16.hpp — the bf16-pair operand format of the CPU forward kernel (forward_kernel.hpp's
// Ops policy), for bf16 inputs on CPUs with AVX-512 BF16: both products run on vdpbf16ps
// (tile_gemm_pairs.hpp), two multiply-adds per f32 lane and instruction, so twice the f32 FMA
// rate, with f32 accumulation and an f32 online softmax.
//
// Operands, all bf16 pairs (two bf16 in one 32-bit word, the lower index in the low half):
//   S^T = K Q^T   pairs along head_dim: K rows (kn, head_dim / 2) words, copied once per call
//                 per KV head (like forward_kv.hpp); Q^T packed per sub-block as B panels
//                 (head_dim / 2, cols) words, unscaled — the softmax scale multiplies the
//                 f32 scores when the micro-kernel stores them.
//   O += P V      pairs along keys: P packed from the f32 probabilities (kn_pairs, cols)
//                 words, rounded to bf16 (as the GPU kernels do); V copied once per call as
//                 pairs of consecutive keys of one sequence (pair_rows, head_dim) words, each
//                 sequence starting on a pair and its odd last key paired with 0.
// A tile starting at an odd key starts its P pairs one key early with a weight of 0, so tiles
// and the tiling-mask are the f32 kernel's. kNative = false runs the same code with the dot
// product emulated by two FMAs (simd::dot_pairs): it tests this file on any AVX2 CPU and is
// chosen only by FASTATTN_CPU_BF16_DOT=emulated.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "cpu/forward_kernel.hpp"
#include "cpu/tile_gemm_pairs.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

// Where the K rows and V pair rows of KV heads [head_begin, head_end) live (words = floats).
struct PairRows {
  const float* k = nullptr;       // (heads, total_k, head_dim / 2)
  const float* v = nullptr;       // (heads, pair_rows, head_dim)
  std::int64_t k_head_stride = 0;
  std::int64_t v_head_stride = 0;
  std::int64_t head_begin = 0;
  const std::int64_t* pair_start = nullptr;  // (batch + 1): sequence b's first pair row

  const float* k_row(const AttentionProblem& p, std::int64_t b, std::int64_t t, std::int64_t kv_head) const {
    const std::int64_t token = p.is_varlen() ? p.k_start(b) + t : b * p.seqlen_k + t;
    return k + (kv_head - head_begin) * k_head_stride + token * (p.head_dim / 2);
  }
  // Pair row r of sequence b: keys 2r and 2r + 1.
  const float* v_pair_row(const AttentionProblem& p, std::int64_t b, std::int64_t r, std::int64_t kv_head) const {
    return v + (kv_head - head_begin) * v_head_stride + (pair_start[b] + r) * p.head_dim;
  }
};

// The copies of one call: pair rows per sequence, and how many KV heads are copied at a time.
struct PairPlan {
  std::vector<std::int64_t> pair_start;  // (batch + 1)
  std::int64_t heads_per_chunk = 0;
  std::size_t chunk_bytes = 0;

  explicit PairPlan(const AttentionProblem& p) : pair_start(static_cast<std::size_t>(p.batch) + 1, 0) {
    for (std::int64_t b = 0; b < p.batch; ++b) {
      pair_start[static_cast<std::size_t>(b) + 1] = pair_start[static_cast<std::size_t>(b)] + (p.k_len(b) + 1) / 2;
    }
    const std::int64_t d = p.head_dim;
    const std::size_t head_bytes = static_cast<std::size_t>(p.total_k * d) * 2 +
                                   static_cast<std::size_t>(pair_start.back() * d) * 4;
    heads_per_chunk = kv_heads_per_chunk(head_bytes, p.num_kv_heads);
    chunk_bytes = head_bytes * static_cast<std::size_t>(heads_per_chunk);
  }
};

// Copies K rows and V pair rows of KV heads [head_begin, head_end) (bf16 input) into packed.
// Called by every thread of a parallel region: orphaned `omp for` loops ending in barriers.
inline PairRows stage_pair_rows(const AttentionProblem& p, const PairPlan& plan, std::int64_t head_begin,
                                std::int64_t head_end, void* packed) {
  const std::int64_t d = p.head_dim;
  const std::int64_t tokens = p.total_k;
  const std::int64_t pair_rows = plan.pair_start.back();
  const std::int64_t heads = head_end - head_begin;
  auto* k_dst = static_cast<std::uint16_t*>(packed);               // (heads, tokens, d) bf16
  std::uint16_t* v_dst = k_dst + heads * tokens * d;                // (heads, pair_rows, d, 2) bf16
  const auto* k_src = static_cast<const std::uint16_t*>(p.k.data);
  const auto* v_src = static_cast<const std::uint16_t*>(p.v.data);
  const bool varlen = p.is_varlen();
#pragma omp for schedule(static)
  for (std::int64_t t = 0; t < tokens; ++t) {
    // Sequence b and key j of global token t. Varlen tokens before cu_seqlens_k[0] or from
    // cu_seqlens_k[batch] on belong to no sequence (the API allows them): no pair row, and
    // their K row is never read.
    std::int64_t b = 0, j = t;
    if (varlen) {
      if (t < p.cu_seqlens_k[0] || t >= p.cu_seqlens_k[p.batch]) continue;
      b = std::upper_bound(p.cu_seqlens_k, p.cu_seqlens_k + p.batch + 1, static_cast<std::int32_t>(t)) -
          p.cu_seqlens_k - 1;
      j = t - p.k_start(b);
    } else if (p.seqlen_k > 0) {
      b = t / p.seqlen_k;
      j = t % p.seqlen_k;
    }
    const bool odd_tail = j == p.k_len(b) - 1 && (j % 2) == 0;  // its pair's high half is 0
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kh = head_begin + h;
      std::memcpy(k_dst + (h * tokens + t) * d, k_src + p.offset_k(p.k, b, j, kh),
                  static_cast<std::size_t>(d) * 2);
      const std::uint16_t* v_row = v_src + p.offset_k(p.v, b, j, kh);
      std::uint16_t* pair = v_dst + ((h * pair_rows + plan.pair_start[static_cast<std::size_t>(b)] + j / 2) * d) * 2;
      for (std::int64_t c = 0; c < d; ++c) {
        pair[2 * c + (j % 2)] = v_row[c];
        if (odd_tail) pair[2 * c + 1] = 0;
      }
    }
  }
  PairRows r;
  r.k = reinterpret_cast<const float*>(k_dst);
  r.v = reinterpret_cast<const float*>(v_dst);
  r.k_head_stride = tokens * (d / 2);
  r.v_head_stride = pair_rows * d;
  r.head_begin = head_begin;
  r.pair_start = plan.pair_start.data();
  return r;
}

template <class V, bool kNative>
struct Bf16PairOperands {
  using Kv = PairRows;
  using Plan = PairPlan;
  static constexpr std::int64_t kPanel = gemm::panel_width<V>();

  static Kv stage_kv(const AttentionProblem& p, const Plan& plan, std::int64_t c0, std::int64_t c1, void* packed) {
    return stage_pair_rows(p, plan, c0, c1, packed);
  }

  // Q rows [q0, q0 + rows) of head h (bf16) -> B panels (head_dim / 2, cols) of pairs; padded
  // columns are 0. staging (rows, head_dim / 2) words receives the rows first. Unscaled.
  static void pack_query_block(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                               std::int64_t rows, std::int64_t cols, float /*q_scale*/, float* staging,
                               float* panels) {
    const std::int64_t d2 = p.head_dim / 2;
    const auto* q = static_cast<const std::uint16_t*>(p.q.data);
    auto* words = reinterpret_cast<std::uint32_t*>(staging);
    for (std::int64_t i = 0; i < rows; ++i) {
      std::memcpy(words + i * d2, q + p.offset_q(p.q, b, q0 + i, h), static_cast<std::size_t>(d2) * 4);
    }
    auto* out = reinterpret_cast<std::uint32_t*>(panels);
    for (std::int64_t r0 = 0; r0 < cols; r0 += kPanel) {
      std::uint32_t* panel = out + (r0 / kPanel) * d2 * kPanel;
      const std::int64_t height = std::clamp<std::int64_t>(rows - r0, 0, kPanel);
      for (std::int64_t c = 0; c < d2; ++c) {
        std::uint32_t* row = panel + c * kPanel;
        std::int64_t r = 0;
        for (; r < height; ++r) row[r] = words[(r0 + r) * d2 + c];
        for (; r < kPanel; ++r) row[r] = 0;
      }
    }
  }

  static void attend_tile(const AttentionProblem& p, const SubBlock& sb, const ForwardScratch& s, const Kv& kv,
                          std::int64_t b, std::int64_t kv_head, float q_scale, const SequenceMask& mask,
                          std::int64_t k_lo, std::int64_t kn, TileClass tile) {
    constexpr std::int64_t MR = V::kGemmRows;
    const std::int64_t d = p.head_dim, d2 = d / 2;
    float* scores = s.scores;

    // ---- S^T (kn, cols) = q_scale * K_tile Q^T; on partial tiles only the keys some query of
    // each panel sees (as forward_f32.hpp's score_tile; apply_mask fills the rest).
    const float* k_tile = kv.k_row(p, b, k_lo, kv_head);
    if (tile == TileClass::full) {
      gemm::tile_gemm_pairs<V, kNative>(kn, sb.cols, d2, gemm::MatrixA{k_tile, d2, gemm::Layout::row_major},
                                        gemm::packed_b<V>(sb.q_panels, d2), scores, sb.cols, false, q_scale);
    } else {
      for (std::int64_t j0 = 0; j0 < sb.cols; j0 += kPanel) {
        const std::int64_t kb = std::max(k_lo, mask.key_begin(sb.q0 + j0));
        const std::int64_t ke = std::min(k_lo + kn, mask.key_end(sb.q0 + j0 + kPanel));
        if (kb >= ke) continue;
        gemm::tile_gemm_pairs<V, kNative>(ke - kb, kPanel, d2,
                                          gemm::MatrixA{k_tile + (kb - k_lo) * d2, d2, gemm::Layout::row_major},
                                          gemm::packed_b<V>(sb.q_panels + j0 * d2, d2),
                                          scores + (kb - k_lo) * sb.cols + j0, sb.cols, false, q_scale);
      }
    }
    if (p.softcap > 0.0f) apply_softcap<V>(scores, sb.cols, kn, sb.cols, p.softcap * kLog2e);
    if (tile == TileClass::partial) apply_mask(scores, sb.cols, kn, sb.cols, mask, sb.q0, k_lo);
    online_softmax_update<V>(scores, sb.cols, kn, sb.cols, sb.row_max, sb.row_sum, sb.alpha);
    rescale_accumulator<V>(sb.acc, d, sb.acc_rows, sb.alpha);

    // ---- P as pairs of keys (k_first + 2r, + 1), k_first = k_lo rounded down to even: key
    // k_first is weighted 0 when k_lo is odd, and so is the key after the tile when the count
    // is odd. pairs: (n_pairs, cols) words.
    const std::int64_t shift = k_lo & 1, k_first = k_lo - shift;
    const std::int64_t n_pairs = (kn + shift + 1) / 2;
    pack_probability_pairs(scores, sb.cols, kn, shift, n_pairs, s.pairs);

    // ---- O (acc_rows, d) += P (acc_rows, keys) V (keys, d), P(i, pair r) at pairs[r * cols + i]
    const float* v_pairs = kv.v_pair_row(p, b, k_first / 2, kv_head);
    if (tile == TileClass::full) {
      gemm::tile_gemm_pairs<V, kNative>(sb.acc_rows, d, n_pairs, gemm::MatrixA{s.pairs, sb.cols, gemm::Layout::col_major},
                                        gemm::row_major_b<V>(v_pairs, d), sb.acc, d, true);
      return;
    }
    for (std::int64_t i0 = 0; i0 < sb.acc_rows; i0 += MR) {
      const std::int64_t kb = std::max(k_lo, mask.key_begin(sb.q0 + i0));
      const std::int64_t ke = std::min(k_lo + kn, mask.key_end(sb.q0 + i0 + MR));
      if (kb >= ke) continue;
      const std::int64_t rb = (kb - k_first) / 2, re = (ke - k_first + 1) / 2;
      gemm::tile_gemm_pairs<V, kNative>(MR, d, re - rb,
                                        gemm::MatrixA{s.pairs + rb * sb.cols + i0, sb.cols, gemm::Layout::col_major},
                                        gemm::row_major_b<V>(v_pairs + rb * d, d), sb.acc + i0 * d, d, true);
    }
  }

  // pairs[r * cols + i] = (P(2r - shift, i), P(2r + 1 - shift, i)) rounded to bf16, where
  // P(j, i) = scores[j * cols + i] for 0 <= j < kn and 0 otherwise. cols: whole vectors.
  static void pack_probability_pairs(const float* scores, std::int64_t cols, std::int64_t kn, std::int64_t shift,
                                     std::int64_t n_pairs, float* pairs) {
    constexpr int W = V::kWidth;
    for (std::int64_t r = 0; r < n_pairs; ++r) {
      const std::int64_t lo = 2 * r - shift, hi = lo + 1;
      const float* row_lo = lo >= 0 && lo < kn ? scores + lo * cols : nullptr;
      const float* row_hi = hi < kn ? scores + hi * cols : nullptr;
      float* out = pairs + r * cols;
      for (std::int64_t i = 0; i < cols; i += W) {
        const typename V::vec a = row_lo ? V::load(row_lo + i) : V::zero();
        const typename V::vec c = row_hi ? V::load(row_hi + i) : V::zero();
        V::store(out + i, V::pack_pairs(a, c));
      }
    }
  }
};

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
