// forward_amx.hpp — the AMX operand format of the CPU forward kernel (forward_kernel.hpp's Ops
// policy) for bf16 inputs: both products on AMX tiles (amx.hpp, tdpbf16ps: 16 x 16 x 32 per
// instruction), the online softmax in f32 on the vector unit (V), fused with packing P.
//
// Everything stays transposed (keys x queries), like the other kernels' score tiles, so that
// neither product needs a transpose in the inner loop and the softmax statistics are lanes:
//   S^T (kn16, cols) f32 = K_tile (kn16, d) bf16 row-major  x  Q^T (d, cols) as VNNI pairs
//        A = the staged K rows as they are; B = Q^T (d / 2, cols) words, word (r, i) =
//        (Q(i, 2r), Q(i, 2r + 1)) = word r of Q row i, packed once per sub-block.
//   O^T (d, cols) f32 += V^T_tile (d, 2 n16) bf16 row-major  x  P^T (n16, cols) as VNNI pairs
//        A = V staged transposed per KV head: (d, tokens) bf16; B = P^T pairs
//        (pair r, query i) = (P(i, k_first + 2r), P(i, k_first + 2r + 1)), which is what the
//        softmax writes, two score rows at a time, straight from its registers.
// kn16 = kn rounded up to 16 (tile rows), n16 = key pairs rounded up to 16 (one 32-key k-step);
// the extra K rows give scores nobody reads, the extra pairs are 0. Staged K and V^T have 64
// zero tokens after each head, so those reads stay in bounds and finite.
// A tile starting at an odd key starts its pairs one key early with weight 0 (as
// forward_bf16.hpp), so tiles and the tiling-mask are the driver's.
// head_dim must be a multiple of 32 (the k-step of S^T; the dispatcher checks).
//
// Engine = amx::Native (forward_amx.cpp) or amx::Emulated (forward_amx_emulated_*.cpp): one
// code path, tested on any CPU.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "cpu/amx.hpp"
#include "cpu/transpose16.hpp"
#include "cpu/forward_kernel.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

inline constexpr std::int64_t kAmxTokenPad = 64;  // zero tokens after each staged head

// Where the staged K rows and V^T of KV heads [head_begin, head_end) live.
struct AmxKv {
  const std::uint16_t* k = nullptr;   // (heads, tokens + pad, d) bf16
  const std::uint16_t* vt = nullptr;  // (heads, d, ld) bf16, ld = tokens + pad
  std::int64_t ld = 0;                // tokens + pad
  std::int64_t head_begin = 0;

  std::int64_t token(const AttentionProblem& p, std::int64_t b, std::int64_t t) const {
    return p.is_varlen() ? p.k_start(b) + t : b * p.seqlen_k + t;
  }
  const std::uint16_t* k_row(const AttentionProblem& p, std::int64_t b, std::int64_t t, std::int64_t kv_head) const {
    return k + ((kv_head - head_begin) * ld + token(p, b, t)) * p.head_dim;
  }
  // Column of key t in V^T: row c of the returned block is at + c * ld.
  const std::uint16_t* vt_col(const AttentionProblem& p, std::int64_t b, std::int64_t t, std::int64_t kv_head) const {
    return vt + (kv_head - head_begin) * p.head_dim * ld + token(p, b, t);
  }
};

struct AmxPlan {
  std::int64_t heads_per_chunk = 0;
  std::size_t chunk_bytes = 0;
  explicit AmxPlan(const AttentionProblem& p) {
    const std::size_t head_bytes = static_cast<std::size_t>((p.total_k + kAmxTokenPad) * p.head_dim) * 2 * 2;
    heads_per_chunk = kv_heads_per_chunk(head_bytes, p.num_kv_heads);
    chunk_bytes = head_bytes * static_cast<std::size_t>(heads_per_chunk);
  }
};


// V^T columns [t0, t0 + n) of one head: vt[c * ld + i] = rows[i][c] for c < d (a multiple of
// 32), n <= 32. With AVX-512 a full block of 32 tokens goes through registers, 32 dims at a
// time: token pairs interleaved into 32-bit words (vpermt2w), then a 16 x 16 transpose of
// those words, whose rows are 32 consecutive tokens of one dim; else element by element.
inline void transpose_v_block(const std::uint16_t* const* rows, std::int64_t n, std::int64_t d, std::uint16_t* vt,
                              std::int64_t ld) {
#if defined(__AVX512BW__)
  if (n == 32) {
    alignas(64) std::uint16_t lo_idx[32], hi_idx[32];
    for (int i = 0; i < 16; ++i) {
      lo_idx[2 * i] = static_cast<std::uint16_t>(i);
      lo_idx[2 * i + 1] = static_cast<std::uint16_t>(32 + i);
      hi_idx[2 * i] = static_cast<std::uint16_t>(16 + i);
      hi_idx[2 * i + 1] = static_cast<std::uint16_t>(48 + i);
    }
    const __m512i lo_sel = _mm512_load_si512(lo_idx), hi_sel = _mm512_load_si512(hi_idx);
    for (std::int64_t c0 = 0; c0 < d; c0 += 32) {
      __m512i w_lo[16], w_hi[16];  // word (pair u, dim c0 + c): c < 16 in w_lo, else w_hi
      for (int u = 0; u < 16; ++u) {
        const __m512i a = _mm512_loadu_si512(rows[2 * u] + c0);
        const __m512i b = _mm512_loadu_si512(rows[2 * u + 1] + c0);
        w_lo[u] = _mm512_permutex2var_epi16(a, lo_sel, b);
        w_hi[u] = _mm512_permutex2var_epi16(a, hi_sel, b);
      }
      transpose_words_16x16(w_lo);
      transpose_words_16x16(w_hi);
      for (int c = 0; c < 16; ++c) {
        _mm512_storeu_si512(vt + (c0 + c) * ld, w_lo[c]);
        _mm512_storeu_si512(vt + (c0 + 16 + c) * ld, w_hi[c]);
      }
    }
    return;
  }
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t c = 0; c < d; ++c) vt[c * ld + i] = rows[i][c];
  }
}

// Copies K rows and V^T of KV heads [head_begin, head_end) into packed. Tokens that belong to
// no sequence (varlen) and the pad are zero. Called by every thread of a parallel region.
inline AmxKv stage_amx_kv(const AttentionProblem& p, std::int64_t head_begin, std::int64_t head_end, void* packed) {
  const std::int64_t d = p.head_dim;
  const std::int64_t ld = p.total_k + kAmxTokenPad;
  const std::int64_t heads = head_end - head_begin;
  auto* k_dst = static_cast<std::uint16_t*>(packed);
  std::uint16_t* vt_dst = k_dst + heads * ld * d;
  const auto* k_src = static_cast<const std::uint16_t*>(p.k.data);
  const auto* v_src = static_cast<const std::uint16_t*>(p.v.data);
  const bool varlen = p.is_varlen();
  constexpr std::int64_t kBlock = 32;  // tokens per V^T block: 64-byte runs per row
  const std::int64_t blocks = (ld + kBlock - 1) / kBlock;
  static const std::uint16_t kZeroRow[256] = {};  // head_dim <= 256
#pragma omp for schedule(static)
  for (std::int64_t blk = 0; blk < blocks; ++blk) {
    const std::int64_t t0 = blk * kBlock, t1 = std::min(ld, t0 + kBlock);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kh = head_begin + h;
      // V row of each token of the block (kZeroRow outside every sequence and in the pad).
      const std::uint16_t* v_rows[kBlock];
      for (std::int64_t t = t0; t < t1; ++t) {
        std::uint16_t* k_row = k_dst + (h * ld + t) * d;
        std::int64_t b = -1, j = t;
        if (t < p.total_k) {
          if (varlen) {
            if (t >= p.cu_seqlens_k[0] && t < p.cu_seqlens_k[p.batch]) {
              b = std::upper_bound(p.cu_seqlens_k, p.cu_seqlens_k + p.batch + 1, static_cast<std::int32_t>(t)) -
                  p.cu_seqlens_k - 1;
              j = t - p.k_start(b);
            }
          } else if (p.seqlen_k > 0) {
            b = t / p.seqlen_k;
            j = t % p.seqlen_k;
          }
        }
        if (b < 0) {
          std::memset(k_row, 0, static_cast<std::size_t>(d) * 2);
          v_rows[t - t0] = kZeroRow;
          continue;
        }
        std::memcpy(k_row, k_src + p.offset_k(p.k, b, j, kh), static_cast<std::size_t>(d) * 2);
        v_rows[t - t0] = v_src + p.offset_k(p.v, b, j, kh);
      }
      transpose_v_block(v_rows, t1 - t0, d, vt_dst + h * d * ld + t0, ld);
    }
  }
  AmxKv kv;
  kv.k = k_dst;
  kv.vt = vt_dst;
  kv.ld = ld;
  kv.head_begin = head_begin;
  return kv;
}

// GCC 12 reports _mm512_undefined_ps() inside _mm512_max_ps as used uninitialized once
// inlined into softmax_group's register arrays (a false positive: the instruction ignores it).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
template <class V, class Engine>
struct AmxOperands {
  using Kv = AmxKv;
  using Plan = AmxPlan;
  // O lives transposed, (head_dim, cols) f32 per sub-block (the driver zeroes and writes it
  // through zero_accumulator / write_sub_block below).
  static constexpr bool kAccTransposed = true;
  static constexpr std::int64_t kColumnAlign = 16;  // query columns: whole 16-column tiles

  static Kv stage_kv(const AttentionProblem& p, const Plan&, std::int64_t c0, std::int64_t c1, void* packed) {
    return stage_amx_kv(p, c0, c1, packed);
  }

  // Q^T as VNNI pairs: (d / 2, cols) words, word (r, i) = word r of Q row q0 + i (0 for the
  // padded columns). Unscaled: the scale is applied to the f32 scores in the softmax.
  static void pack_query_block(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                               std::int64_t rows, std::int64_t cols, float /*q_scale*/, float* /*staging*/,
                               float* panels) {
    const std::int64_t d2 = p.head_dim / 2;
    const auto* q = static_cast<const std::uint16_t*>(p.q.data);
    auto* out = reinterpret_cast<std::uint32_t*>(panels);
#if defined(__AVX512BW__)
    // 16 queries x 16 words at a time through registers (d2 and cols are multiples of 16).
    for (std::int64_t i0 = 0; i0 < cols; i0 += 16) {
      const std::uint16_t* q_rows[16];
      for (int i = 0; i < 16; ++i) q_rows[i] = i0 + i < rows ? q + p.offset_q(p.q, b, q0 + i0 + i, h) : nullptr;
      for (std::int64_t r0 = 0; r0 < d2; r0 += 16) {
        __m512i w[16];
        for (int i = 0; i < 16; ++i) w[i] = q_rows[i] ? _mm512_loadu_si512(q_rows[i] + 2 * r0) : _mm512_setzero_si512();
        transpose_words_16x16(w);
        for (int r = 0; r < 16; ++r) _mm512_storeu_si512(out + (r0 + r) * cols + i0, w[r]);
      }
    }
#else
    for (std::int64_t i = 0; i < cols; ++i) {
      if (i < rows) {
        std::uint32_t row[kMaxWords];
        std::memcpy(row, q + p.offset_q(p.q, b, q0 + i, h), static_cast<std::size_t>(d2) * 4);
        for (std::int64_t r = 0; r < d2; ++r) out[r * cols + i] = row[r];
      } else {
        for (std::int64_t r = 0; r < d2; ++r) out[r * cols + i] = 0;
      }
    }
#endif
  }
  static constexpr std::int64_t kMaxWords = 128;  // head_dim <= 256

  static void zero_accumulator(float* acc, std::int64_t d, std::int64_t cols) {
    for (std::int64_t c = 0; c < d; ++c) simd::zero_row<V>(acc + c * cols, cols);
  }

  static void attend_tile(const AttentionProblem& p, const SubBlock& sb, const ForwardScratch& s, const Kv& kv,
                          std::int64_t b, std::int64_t kv_head, float q_scale, const SequenceMask& mask,
                          std::int64_t k_lo, std::int64_t kn, TileClass tile) {
    const std::int64_t d = p.head_dim, cols = sb.cols;
    float* scores = s.scores;
    amx::TileScope<Engine> scope(amx::gemm_config());
    const bool masked = tile == TileClass::partial;
    // P^T is packed as key pairs (k_first + 2r, + 1) for r < n16.
    const std::int64_t shift = k_lo & 1, k_first = k_lo - shift;
    const std::int64_t n16 = round_up((kn + shift + 1) / 2, 16);
    auto* pairs = reinterpret_cast<std::uint32_t*>(s.pairs);

    // ---- S^T (kn16, cols) = K_tile Q^T, unscaled f32, then the online softmax of the tile.
    const std::int64_t kn16 = round_up(kn, 16);
    amx::gemm_bf16<Engine>(kn16, cols, d, kv.k_row(p, b, k_lo, kv_head), d,
                           reinterpret_cast<const std::uint32_t*>(sb.q_panels), cols, scores, cols, false);
    const float scale = prepare_scores(p, scores, cols, kn, q_scale, mask, sb.q0, k_lo, masked);
    const std::uint64_t moved =
        softmax_to_pairs(scores, cols, kn, shift, n16, scale, sb.row_max, sb.row_sum, sb.alpha, pairs, masked);
    if (moved) rescale(sb.acc, d, cols, sb.alpha, moved);

    // ---- O^T (d, cols) += V^T_tile (d, 2 n16) P^T pairs (n16, cols)
    amx::gemm_bf16<Engine>(d, cols, 2 * n16, kv.vt_col(p, b, k_first, kv_head), kv.ld, pairs, cols, sb.acc, cols, true);
  }

  // Soft-cap and mask on rows [0, kn) of S^T, keys from k0; returns the scale the softmax applies.
  // The scores are scaled here instead for the soft-cap, and for a negative scale, so that the
  // mask's -inf stays -inf after scaling.
  static float prepare_scores(const AttentionProblem& p, float* scores, std::int64_t cols, std::int64_t kn,
                              float q_scale, const SequenceMask& mask, std::int64_t q0, std::int64_t k0, bool masked) {
    float scale = q_scale;
    if (p.softcap > 0.0f || q_scale < 0.0f) {
      for (std::int64_t j = 0; j < kn; ++j) simd::scale_row<V>(scores + j * cols, cols, q_scale);
      if (p.softcap > 0.0f) apply_softcap<V>(scores, cols, kn, cols, p.softcap * kLog2e);
      scale = 1.0f;
    }
    if (masked) apply_mask(scores, cols, kn, cols, mask, q0, k0);
    return scale;
  }

  // For each query column: m_new = max(m, scale max_j s_j), p_j = exp2(scale s_j - m_use),
  // l = alpha l + sum_j p_j (as online_softmax_update), with P written as bf16 pairs:
  // pairs[r * cols + i] = (P(2r - shift, i), P(2r + 1 - shift, i)), rows outside [0, kn) = 0.
  // Returns which column vectors (bit c / kWidth) have an alpha other than 1 (O^T to rescale).
  // Column groups of up to kGroup vectors keep their statistics in registers while both passes
  // stream through the tile row by row (the tile is 32-96 KiB: sequential rows keep the
  // prefetchers ahead where a column-at-a-time walk missed L1).
  static constexpr int kGroup = 6;
  static std::uint64_t softmax_to_pairs(const float* scores, std::int64_t cols, std::int64_t kn, std::int64_t shift,
                               std::int64_t n16, float scale, float* row_max, float* row_sum, float* alpha,
                               std::uint32_t* pairs, bool masked) {
    constexpr int W = V::kWidth;
    std::uint64_t moved = 0;
    for (std::int64_t c0 = 0; c0 < cols; c0 += kGroup * W) {
      const std::int64_t bit = c0 / W;  // beyond 64 vectors: every vector counts as moved
      const auto set = [&](std::uint64_t m) { moved |= bit + kGroup <= 64 ? m << bit : ~std::uint64_t{0}; };
      const std::int64_t nv = std::min<std::int64_t>(kGroup, (cols - c0) / W);
      const float* sc = scores + c0;
      float* out = reinterpret_cast<float*>(pairs) + c0;
      switch (nv) {
        case 6: set(softmax_group<6>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
        case 5: set(softmax_group<5>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
        case 4: set(softmax_group<4>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
        case 3: set(softmax_group<3>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
        case 2: set(softmax_group<2>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
        default: set(softmax_group<1>(sc, cols, kn, shift, n16, scale, row_max + c0, row_sum + c0, alpha + c0, out, masked)); break;
      }
    }
    return moved;
  }

  // (P(key 2r), P(key 2r + 1)) as one bf16 pair per lane, rounded to nearest even. With the AMX
  // instructions the CPU has AVX-512 BF16: vcvtne2ps2bf16 gives (lo lanes, hi lanes) as words
  // and one vpermw interleaves them (3 instructions per 2 vectors instead of ~20 for V's
  // integer rounding, which the emulated engine keeps, as it runs on any AVX-512 CPU).
  static typename V::vec pack_pairs(typename V::vec lo, typename V::vec hi) {
#if defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__)
    if constexpr (V::kWidth == 16 && std::is_same_v<Engine, amx::Native>) {
      alignas(64) static constexpr std::uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                                     21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26,
                                                                     11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
      const __m512i words = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // lo 0..15, hi 0..15
      return _mm512_castsi512_ps(_mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), words));
    }
#endif
    return V::pack_pairs(lo, hi);
  }

  // 2^x for the softmax: simd::exp2, or on AVX-512 a degree-4 polynomial on [-1/2, 1/2]
  // (relative error 2.6e-6, far below P's bf16 rounding, 2^-9) scaled by vscalefps; x <= -160
  // gives exactly 0, so masked keys weigh 0 and rows that saw no key keep l = 0.
  template <bool kClamp = true>
  static typename V::vec exp2_fast(typename V::vec x) {
#if defined(__AVX512F__)
    if constexpr (V::kWidth == 16) {
      if (kClamp) x = V::max(x, V::set1(-160.0f));  // also maps NaN to -160
      // (the masked forms: GCC 12's unmasked ones warn about their undefined source operand)
      const __m512 n = _mm512_mask_roundscale_ps(x, 0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 f = _mm512_sub_ps(x, n);
      __m512 q = _mm512_set1_ps(9.570101276040077e-03f);
      q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.591786652803421e-02f));
      q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.40247443318367e-01f));
      q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.931217908859253e-01f));
      const __m512 pf = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.999992847442627e-01f));
      return _mm512_mask_scalef_ps(pf, 0xffff, pf, n);
    }
#endif
    return simd::exp2<V>(x);
  }

  // True when every lane of x satisfies pred (scalar fallback for AVX2).
  template <class Pred>
  static bool all_lanes(typename V::vec x, Pred pred) {
    alignas(64) float lanes[V::kWidth];
    V::store(lanes, x);
    bool all = true;
    for (int i = 0; i < V::kWidth; ++i) all &= pred(lanes[i]);
    return all;
  }

  // The exp pass of one column group: P^T pairs (see softmax_to_pairs) with p = exp2(x),
  // x = scale s - m, neg_m[v] = -m; sum[v] += the tile's p. kTrackMax: also mx[v] = max(mx[v], x).
  template <int NV, bool kTrackMax, bool kClamp>
  static void exp_pass(const float* scores, std::int64_t cols, std::int64_t kn, std::int64_t shift, std::int64_t n16,
                       typename V::vec sv, const typename V::vec* neg_m, typename V::vec* sum, typename V::vec* mx,
                       float* out) {
    using vec = typename V::vec;
    constexpr int W = V::kWidth;
    std::int64_t r = 0;
    if (shift) {  // pair 0 = (key before the tile: 0, score row 0)
      for (int v = 0; v < NV; ++v) {
        const vec x = V::fmadd(V::load(scores + v * W), sv, neg_m[v]);
        if constexpr (kTrackMax) mx[v] = V::max(mx[v], x);
        const vec hi = exp2_fast<kClamp>(x);
        sum[v] = V::add(sum[v], hi);
        V::store(out + v * W, pack_pairs(V::zero(), hi));
      }
      r = 1;
    }
    for (; 2 * r + 1 - shift < kn; ++r) {  // both keys in the tile
      const float* lo_row = scores + (2 * r - shift) * cols;
      for (int v = 0; v < NV; ++v) {
        const vec x_lo = V::fmadd(V::load(lo_row + v * W), sv, neg_m[v]);
        const vec x_hi = V::fmadd(V::load(lo_row + cols + v * W), sv, neg_m[v]);
        if constexpr (kTrackMax) mx[v] = V::max(mx[v], V::max(x_lo, x_hi));
        const vec lo = exp2_fast<kClamp>(x_lo);
        const vec hi = exp2_fast<kClamp>(x_hi);
        sum[v] = V::add(sum[v], V::add(lo, hi));
        V::store(out + r * cols + v * W, pack_pairs(lo, hi));
      }
    }
    if (r < n16 && 2 * r - shift < kn) {  // an odd last key: (row, 0)
      for (int v = 0; v < NV; ++v) {
        const vec x = V::fmadd(V::load(scores + (2 * r - shift) * cols + v * W), sv, neg_m[v]);
        if constexpr (kTrackMax) mx[v] = V::max(mx[v], x);
        const vec lo = exp2_fast<kClamp>(x);
        sum[v] = V::add(sum[v], lo);
        V::store(out + r * cols + v * W, pack_pairs(lo, V::zero()));
      }
      ++r;
    }
    for (; r < n16; ++r) {
      for (int v = 0; v < NV; ++v) V::store(out + r * cols + v * W, V::zero());
    }
  }

  // How far this tile's max may exceed the running max m before the single pass gives way to
  // the two-pass form (log2 units): p <= 2^kMaxLag.
  static constexpr float kMaxLag = 8.0f;

  // One column group. Usually a single pass: when every column has seen a key (m finite), P is
  // computed against the running max m itself and m is kept (a lazy max: l and O stay relative
  // to m, so nothing is rescaled), provided the tile's max exceeds m by at most kMaxLag; p is
  // then at most 2^8, and bf16's relative rounding and f32's range are unchanged. Otherwise
  // (the first tile of a column, or a max that jumped, or NaN) the tile is redone in two passes
  // with the exact new max and alpha as the online softmax does. Either way the result is the
  // same softmax; only the reference m of l and O differs. Returns the moved bits (two-pass only).
  template <int NV>
  static std::uint64_t softmax_group(const float* scores, std::int64_t cols, std::int64_t kn, std::int64_t shift,
                            std::int64_t n16, float scale, float* row_max, float* row_sum, float* alpha, float* out,
                            bool masked) {
    using vec = typename V::vec;
    constexpr int W = V::kWidth;
    const vec neg_inf = V::set1(-std::numeric_limits<float>::infinity());
    const vec sv = V::set1(scale);
    vec mx[NV], neg_m[NV], sum[NV];
    bool single = true;
    for (int v = 0; v < NV && single; ++v) {
      single = all_lanes(V::load(row_max + v * W), [](float m) { return m > -std::numeric_limits<float>::infinity(); });
    }
    if (single) {
      for (int v = 0; v < NV; ++v) {
        neg_m[v] = V::sub(V::zero(), V::load(row_max + v * W));
        sum[v] = V::zero();
        mx[v] = neg_inf;
      }
      // Unmasked tiles have finite scores unless the inputs are not; a NaN or infinite p shows in
      // the sum and sends the tile to the two-pass form, whose clamp keeps NaN scores at weight 0.
      if (masked) {
        exp_pass<NV, true, true>(scores, cols, kn, shift, n16, sv, neg_m, sum, mx, out);
      } else {
        exp_pass<NV, true, false>(scores, cols, kn, shift, n16, sv, neg_m, sum, mx, out);
      }
      bool kept = true;
      for (int v = 0; v < NV && kept; ++v) {
        kept = all_lanes(mx[v], [](float lag) { return lag <= kMaxLag; }) &&
               all_lanes(sum[v], [](float x) { return x <= std::numeric_limits<float>::max(); });
      }
      if (kept) {
        for (int v = 0; v < NV; ++v) V::store(row_sum + v * W, V::add(V::load(row_sum + v * W), sum[v]));
        return 0;
      }
    }
    for (int v = 0; v < NV; ++v) mx[v] = neg_inf;
    for (std::int64_t j = 0; j < kn; ++j) {  // max of the scaled scores (the scale may be negative)
      const float* row = scores + j * cols;
      for (int v = 0; v < NV; ++v) mx[v] = V::max(mx[v], V::mul(V::load(row + v * W), sv));
    }
    std::uint64_t moved = 0;
    for (int v = 0; v < NV; ++v) {
      const vec m_old = V::load(row_max + v * W);
      const vec m_new = V::max(m_old, mx[v]);
      const vec m_use = V::select_eq(m_new, neg_inf, V::zero(), m_new);
      neg_m[v] = V::sub(V::zero(), m_use);
      const vec a = exp2_fast(V::sub(m_old, m_use));
      V::store(alpha + v * W, a);
      V::store(row_max + v * W, m_new);
      moved |= static_cast<std::uint64_t>(!all_lanes(a, [](float x) { return x == 1.0f; })) << v;
      sum[v] = V::zero();
    }
    exp_pass<NV, false, true>(scores, cols, kn, shift, n16, sv, neg_m, sum, nullptr, out);
    for (int v = 0; v < NV; ++v) {
      V::store(row_sum + v * W, V::fmadd(V::load(alpha + v * W), V::load(row_sum + v * W), sum[v]));
    }
    return moved;
  }

  // O^T row c *= alpha (lane-wise over the columns), in the column vectors of `moved`.
  static void rescale(float* acc, std::int64_t d, std::int64_t cols, const float* alpha, std::uint64_t moved) {
    constexpr int W = V::kWidth;
    for (std::int64_t c = 0; c < d; ++c) {
      float* row = acc + c * cols;
      for (std::int64_t i = 0; i < cols; i += W) {
        if (i / W >= 64 || ((moved >> (i / W)) & 1u)) V::store(row + i, V::mul(V::load(row + i), V::load(alpha + i)));
      }
    }
  }

  // Epilogue of one sub-block: O^T (d, cols) -> rows in `staging` (rows, d), then the driver's
  // write_output_rows.
  static void write_sub_block(const AttentionProblem& p, const SubBlock& sb, float* staging, std::int64_t b,
                              std::int64_t h) {
    const std::int64_t d = p.head_dim;
#if defined(__AVX512F__)
    if (V::kWidth == 16 && d % 16 == 0) {  // 16 x 16 blocks through registers
      for (std::int64_t i0 = 0; i0 < sb.rows; i0 += 16) {
        for (std::int64_t c0 = 0; c0 < d; c0 += 16) transpose16(sb.acc + c0 * sb.cols + i0, sb.cols, staging + i0 * d + c0, d);
      }
    } else
#endif
    {
      for (std::int64_t i = 0; i < sb.rows; ++i) {
        for (std::int64_t c = 0; c < d; ++c) staging[i * d + c] = sb.acc[c * sb.cols + i];
      }
    }
    ForwardScratch rows{};
    rows.acc = staging;
    rows.row_max = sb.row_max;
    rows.row_sum = sb.row_sum;
    write_output_rows<V>(p, rows, b, h, sb.q0, sb.rows);
  }
};
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
