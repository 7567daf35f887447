// decode_tiles.hpp — the pieces of the CPU decode kernel (decode_kernel.hpp) that its vector and
// AMX forms share: constants, the per-thread scratch carved into tiles, q.k score rows (f32 or
// bf16 pairs), the online-softmax step, P V register blocks, the split epilogue, the rows of a
// work unit, and the row offsets of a key tile (SequenceKeys, decode_keys.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "common/problem.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/decode_keys.hpp"

namespace fastattn::cpu::decode_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

inline std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
inline std::size_t elem_bytes(DType dtype) { return dtype == DType::f32 ? 4 : 2; }
// f32 -> bf16 bits, round to nearest even (probabilities: finite, >= 0).
inline std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Prefetch into L2 rows [0, n) of a head's next key tile (row r at head + off[r] elements,
// row_bytes long): issued while the current tile is computed, so the next one streams in
// behind it (a tile of one head alone is rows a token stride apart, which the hardware
// prefetchers do not follow across pages).
// One row of row_bytes prefetched into L2, line by line.
inline void prefetch_row(const char* row, std::int64_t row_bytes) {
  for (std::int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
}
inline void prefetch_rows(const char* head, const std::int64_t* off, std::size_t elem, std::int64_t n,
                          std::int64_t row_bytes) {
  for (std::int64_t r = 0; r < n; ++r) prefetch_row(head + static_cast<std::size_t>(off[r]) * elem, row_bytes);
}

// A cursor over one head's rows of the next key tile, prefetched into L2 one at a time while
// the current tile's products run (bf16_dot, decode_bf16_split.hpp), instead of
// prefetch_rows' burst after them: row j at base + off[j]
// (bf16 words, d of them), from row `row` on, `left` rows in all.
struct NextRows {
  const std::uint16_t* base = nullptr;
  const std::int64_t* off = nullptr;
  std::int64_t d = 0, row = 0, left = 0;
  void prefetch_one() {
    if (left <= 0) return;
    prefetch_row(reinterpret_cast<const char*>(base + off[row++]), 2 * d);
    --left;
  }
};

// Row offsets of a unit's current and next key tile (SequenceKeys::rows), on the stack.
struct TileRows {
  alignas(64) std::int64_t k[2][kDecodeMaxBlockK];
  alignas(64) std::int64_t v[2][kDecodeMaxBlockK];
  RowRuns runs[2];
};

struct DecodeScratch {
  float* q;        // (heads * rows, dp): f32 rows, or bf16 pairs (rows of dp bf16, dp / 2 words)
  float* acc;      // (heads * rows, dp): O
  float* k_tile;   // (bk, dp): K rows as f32; under bf16_dot (q.k on bf16 pairs) P as bf16 (rows, bk)
  float* v_tile;   // (bk, dp): V rows as f32
  float* scores;   // (rows, bk): S, then P
  float* row_max;  // (heads * rows): m, log2 units
  float* row_sum;  // (heads * rows): l
  float* alpha;    // (rows): unused pad, kept for a uniform layout
};

inline DecodeScratch carve(const DecodeGeometry& g, float* base) {
  DecodeScratch s{};
  s.q = base;
  s.acc = s.q + g.state_rows() * g.dp;
  s.k_tile = s.acc + g.state_rows() * g.dp;
  s.v_tile = s.k_tile + g.bk * g.dp;
  s.scores = s.v_tile + g.bk * g.dp;
  s.row_max = s.scores + g.rows * g.bk;
  s.row_sum = s.row_max + g.stat_floats();
  s.alpha = s.row_sum + g.stat_floats();
  return s;
}

// out[j] = q . k_j for keys j < kn, k_j = kt + j * dp (f32, dp floats, zero-padded like q).
// Writes round_up(kn, kWidth) entries; those past kn repeat the last key (masked later).
template <class V>
void score_row_f32(const float* q, const float* kt, std::int64_t dp, std::int64_t kn, float* out) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  for (std::int64_t j0 = 0; j0 < kn; j0 += W) {
    const float* rows[W];
    for (int jj = 0; jj < W; ++jj) rows[jj] = kt + std::min<std::int64_t>(j0 + jj, kn - 1) * dp;
    vec acc[W];
#pragma GCC unroll 16
    for (int jj = 0; jj < W; ++jj) acc[jj] = V::zero();
    for (std::int64_t c = 0; c < dp; c += W) {
      const vec qv = V::load(q + c);
#pragma GCC unroll 16
      for (int jj = 0; jj < W; ++jj) acc[jj] = V::fmadd(qv, V::load(rows[jj] + c), acc[jj]);
    }
    V::store(out + j0, V::transpose_sum(acc));
  }
}

// kWidth pairs (2 kWidth bf16) from p, of which n < 2 kWidth are real; the rest read as 0.
template <class V>
typename V::vec load_pairs_partial(const std::uint16_t* p, std::int64_t n) {
#if defined(__AVX512BW__)
  if constexpr (V::kWidth == 16) {
    const __mmask32 m = static_cast<__mmask32>((std::uint64_t{1} << n) - 1);
    return _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, p));
  }
#endif
  alignas(64) std::uint16_t tmp[2 * V::kWidth] = {};
  std::memcpy(tmp, p, static_cast<std::size_t>(n) * 2);
  return V::load(reinterpret_cast<const float*>(tmp));
}

// out[j] = q . k_j on bf16 pairs (vdpbf16ps when kNative, else its FMA emulation), K read in
// place: key j's row at k + off[j] (bf16, head_dim d); q: d bf16 zero-padded to a
// multiple of 2 kWidth. Same output convention as score_row_f32.
template <class V, bool kNative>
void score_row_pairs(const std::uint16_t* q, const std::uint16_t* k, const std::int64_t* off, std::int64_t d,
                     std::int64_t kn, float* out) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  const std::int64_t full = d / (2 * W) * (2 * W);
  for (std::int64_t j0 = 0; j0 < kn; j0 += W) {
    const std::uint16_t* rows[W];
    for (int jj = 0; jj < W; ++jj) rows[jj] = k + off[std::min<std::int64_t>(j0 + jj, kn - 1)];
    vec acc[W];
#pragma GCC unroll 16
    for (int jj = 0; jj < W; ++jj) acc[jj] = V::zero();
    std::int64_t c = 0;
    for (; c < full; c += 2 * W) {
      const vec qv = V::load(reinterpret_cast<const float*>(q + c));
#pragma GCC unroll 16
      for (int jj = 0; jj < W; ++jj) {
        acc[jj] = simd::dot_pairs<V, kNative>(acc[jj], qv, V::load(reinterpret_cast<const float*>(rows[jj] + c)));
      }
    }
    if (c < d) {
      const vec qv = V::load(reinterpret_cast<const float*>(q + c));
      for (int jj = 0; jj < W; ++jj) {
        acc[jj] = simd::dot_pairs<V, kNative>(acc[jj], qv, load_pairs_partial<V>(rows[jj] + c, d - c));
      }
    }
    V::store(out + j0, V::transpose_sum(acc));
  }
}

// One row's online-softmax step over a tile of kn raw scores q.k in s (round_up(kn, kWidth)
// entries); only keys [lo, hi) (lo < hi) are visible to this row. scale: softmax_scale * log2(e),
// or softmax_scale / softcap with cap = softcap * log2(e) (cap 0: no soft-cap).
// s becomes P = exp2(x - m_new); returns alpha = exp2(m_old - m_new) for the row's O.
template <class V>
float softmax_row(float* s, std::int64_t kn, std::int64_t lo, std::int64_t hi, float scale, float cap, float& m,
                  float& l) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  const std::int64_t kn_pad = round_up(kn, W);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const vec sc = V::set1(scale), cp = V::set1(cap);
  vec mx = V::set1(neg_inf);
  for (std::int64_t i = 0; i < kn_pad; i += W) {
    vec x = V::mul(V::load(s + i), sc);
    if (cap > 0.0f) x = V::mul(cp, simd::tanh<V>(x));
    V::store(s + i, x);
  }
  for (std::int64_t i = 0; i < lo; ++i) s[i] = neg_inf;
  for (std::int64_t i = hi; i < kn_pad; ++i) s[i] = neg_inf;
  for (std::int64_t i = 0; i < kn_pad; i += W) mx = V::max(mx, V::load(s + i));
  const float m_tile = V::reduce_max(mx);
  const float m_new = std::max(m, m_tile);
  const float m_use = m_new == neg_inf ? 0.0f : m_new;
  const vec mu = V::set1(m_use);
  vec sum = V::zero();
  for (std::int64_t i = 0; i < kn_pad; i += W) {
    const vec p = simd::exp2<V>(V::sub(V::load(s + i), mu));
    V::store(s + i, p);
    sum = V::add(sum, p);
  }
  const float alpha = std::exp2(m - m_use);  // m = -inf: 0 (O is still 0)
  l = l * alpha + V::reduce_add(sum);
  m = m_new;
  return alpha;
}

// O rows [0, NR) x vectors [0, NV) += P (NR, kn) V_tile (kn, NV vectors); o: row stride dp.
template <class V, int NR, int NV>
void pv_block(float* o, std::int64_t dp, const float* pm, std::int64_t ldp, const float* vt, std::int64_t kn) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  vec acc[NR][NV];
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = V::load(o + r * dp + v * W);
  for (std::int64_t j = 0; j < kn; ++j) {
    vec x[NV];
    for (int v = 0; v < NV; ++v) x[v] = V::load(vt + j * dp + v * W);
    for (int r = 0; r < NR; ++r) {
      const vec b = V::broadcast(pm + r * ldp + j);
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fmadd(b, x[v], acc[r][v]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int v = 0; v < NV; ++v) V::store(o + r * dp + v * W, acc[r][v]);
}

template <class V, int NV>
void pv_rows(std::int64_t nr, float* o, std::int64_t dp, const float* pm, std::int64_t ldp, const float* vt,
             std::int64_t kn) {
  switch (nr) {
    case 4: return pv_block<V, 4, NV>(o, dp, pm, ldp, vt, kn);
    case 3: return pv_block<V, 3, NV>(o, dp, pm, ldp, vt, kn);
    case 2: return pv_block<V, 2, NV>(o, dp, pm, ldp, vt, kn);
    default: return pv_block<V, 1, NV>(o, dp, pm, ldp, vt, kn);
  }
}

// O (rows, dp) += P (rows, kn) V_tile (kn, dp) in register blocks of 4 rows x kMaxVectors.
template <class V>
void accumulate_pv(float* o, std::int64_t rows, std::int64_t dp, const float* pm, std::int64_t ldp,
                   const float* vt, std::int64_t kn) {
  constexpr int W = V::kWidth;
  constexpr int kMaxVectors = V::kRegisters >= 32 ? 4 : 2;  // 4 rows: 16 (8) accumulators
  for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {
    const std::int64_t nr = std::min<std::int64_t>(4, rows - r0);
    for (std::int64_t c0 = 0; c0 < dp; c0 += kMaxVectors * W) {
      const std::int64_t nv = std::min<std::int64_t>(kMaxVectors, (dp - c0) / W);
      float* ob = o + r0 * dp + c0;
      const float* pb = pm + r0 * ldp;
      if (nv == kMaxVectors) {
        pv_rows<V, kMaxVectors>(nr, ob, dp, pb, ldp, vt + c0, kn);
      } else if (nv >= 2) {
        pv_rows<V, 2>(nr, ob, dp, pb, ldp, vt + c0, kn);
        if (nv == 3) pv_rows<V, 1>(nr, ob + 2 * W, dp, pb, ldp, vt + c0 + 2 * W, kn);
      } else {
        pv_rows<V, 1>(nr, ob, dp, pb, ldp, vt + c0, kn);
      }
    }
  }
}

// Position of column c (0..31) of a 32-column chunk of O in the split layout of
// decode_bf16_split.hpp: the chunk's 16 even columns, then its 16 odd ones.
constexpr std::int64_t split_position(std::int64_t c) { return (c % 2) * 16 + c / 2; }
// ... and in its pair layout (pv_pairs): vpunpcklwd / vpunpckhwd work within 128-bit lanes, so
// the low register of a chunk holds columns 0-3, 8-11, 16-19, 24-27 and the high one the others.
constexpr std::int64_t pair_position(std::int64_t c) { return (c % 8) / 4 * 16 + c / 8 * 4 + c % 4; }

// The order of O's columns within each 32-column chunk, as the P V form left it.
enum class ColumnOrder { natural, split, pairs };
// Where column c of O sits in that order.
constexpr std::int64_t column_position(ColumnOrder order, std::int64_t c) {
  if (order == ColumnOrder::natural) return c;
  return c / 32 * 32 + (order == ColumnOrder::split ? split_position(c % 32) : pair_position(c % 32));
}

// Epilogue of a unit: its split's partial out = O / l and lse = (m + log2 l) ln 2 for the rows
// [0, rows) of each of `heads` heads (state row x = head * row_stride + i); a row that saw no key
// of the split gets out 0 and lse -inf (merge_weights then gives it weight 0).
// order: how O's 32-column chunks are laid out (split_position, pair_position).
template <class V>
void write_partials(const DecodeScratch& s, std::int64_t heads, std::int64_t row_stride, std::int64_t rows,
                    std::int64_t d, std::int64_t dp, float* part_out, float* part_lse,
                    ColumnOrder order = ColumnOrder::natural) {
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t x = hh * row_stride + i;
      const float l = s.row_sum[x];
      float* o = part_out + x * dp;
      if (l == 0.0f) {
        simd::zero_row<V>(o, d);
        part_lse[x] = -std::numeric_limits<float>::infinity();
      } else {
        const float inv = 1.0f / l;
        const float* a = s.acc + x * dp;
        for (std::int64_t c = 0; c < d; ++c) o[c] = a[column_position(order, c)] * inv;
        part_lse[x] = (s.row_max[x] + std::log2(l)) * kLn2;
      }
    }
  }
}

// Rows of one unit: [r0, r0 + rows) of the (b, kv_head) tile of group * len_q rows.
struct UnitRows {
  std::int64_t r0 = 0, rows = 0;
};
inline UnitRows unit_rows(const AttentionProblem& p, const DecodePlan& plan, std::int64_t b, std::int64_t chunk) {
  const std::int64_t all = p.group_size() * p.q_len(b);
  UnitRows u;
  u.r0 = chunk * plan.rows;
  u.rows = u.r0 < all ? std::min(plan.rows, all - u.r0) : 0;
  return u;
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::decode_detail
