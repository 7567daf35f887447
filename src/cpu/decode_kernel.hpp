// decode_kernel.hpp — the CPU decode kernel: a few query tokens over a long KV cache.
//
// The prefill kernel (forward_kernel.hpp) spends its effort on query blocks: for decode it
// pads one query row to a whole micro-tile, reads K/V once per query head, and converts the
// whole cache to f32 first. Here the unit of work is (sequence b, KV head, row chunk, key split)
// (decode_plan, cpu_backend.hpp; a block of KV heads per unit, see decode_unit), and inside it:
//   rows: the query heads sharing the KV head x the query tokens, packed into one tile
//         row r = chunk * plan.rows + i  ->  token t = r / group, head h = kv_head * group + r % group
//         Q: (rows, dp) f32, or bf16 pairs for vdpbf16ps      dp = head_dim rounded up to 32
//   keys: the split's part of [key_begin(first token), key_end(last token)), in tiles of block_k:
//         K tile: f32 rows staged in L1 (dp floats apart), or read in place as bf16 pairs
//         V tile: f32 rows staged in L1
//         S (rows, kn) = Q K^T: per row, kWidth keys at a time, each key one accumulator vector,
//                       reduced by V::transpose_sum into one vector of kWidth scores
//         online softmax per row (scores in log2 units, each row's own causal/window interval)
//         O (rows, dp) += P V: register blocks of 4 rows x up to 64 columns
//   so every K/V byte of the split is read from memory once for all its rows, in its dtype.
// Keys come through SequenceKeys (decode_keys.hpp): the forward's K/V, or a KV cache's pages
// (block table, any page size), a tile's row offsets filled page run by page run.
// Each unit writes a partial (out = O / l in f32, lse); a second pass folds the splits of each
// (b, KV head, row chunk) in split order with merge_weights / weighted (inference/
// merge_problem.hpp, the math of merge_states) and writes out and lse in the output dtype.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <type_traits>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "api/host_pool.hpp"
#include "common/mask.hpp"
#include "common/problem.hpp"
#include "cpu/amx.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/decode_keys.hpp"
#include "inference/merge_problem.hpp"

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
inline void prefetch_rows(const char* head, const std::int64_t* off, std::size_t elem, std::int64_t n,
                          std::int64_t row_bytes) {
  for (std::int64_t r = 0; r < n; ++r) {
    const char* row = head + static_cast<std::size_t>(off[r]) * elem;
    for (std::int64_t b = 0; b < row_bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
  }
}

// Row offsets of a unit's current and next key tile (SequenceKeys::rows), on the stack.
struct TileRows {
  alignas(64) std::int64_t k[2][kDecodeMaxBlockK];
  alignas(64) std::int64_t v[2][kDecodeMaxBlockK];
  RowRuns runs[2];
};

struct DecodeScratch {
  float* q;        // (heads * rows, dp): f32 rows, or bf16 pairs (rows of dp bf16, dp / 2 words)
  float* acc;      // (heads * rows, dp): O
  float* k_tile;   // (bk, dp): K rows as f32 (not used when q.k runs on bf16 pairs)
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

// Epilogue of a unit: its split's partial out = O / l and lse = (m + log2 l) ln 2 for the rows
// [0, rows) of each of `heads` heads (state row x = head * row_stride + i); a row that saw no key
// of the split gets out 0 and lse -inf (merge_weights then gives it weight 0).
template <class V>
void write_partials(const DecodeScratch& s, std::int64_t heads, std::int64_t row_stride, std::int64_t rows,
                    std::int64_t d, std::int64_t dp, float* part_out, float* part_lse) {
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
        for (std::int64_t c = 0; c < d; ++c) o[c] = s.acc[x * dp + c] * inv;
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

// One work unit: KV heads [kv0, kv0 + plan.heads_per_unit) of sequence b, rows of one chunk,
// keys of one split. Partial out (heads, rows, dp) f32 and lse (heads, rows). The heads are the
// inner loop of each key tile: a tile of every head is one contiguous stretch of the caller's
// [tokens, kv_heads, head_dim] K and V, read front to back (one head's rows alone sit a token
// stride apart, one or two to a page, and cost a page walk each on this VM: 2x slower).
template <class V, Bf16Dot kDot>
void decode_unit(const AttentionProblem& p, const DecodeKeys* cache, const DecodePlan& plan, const DecodeGeometry& g,
                 const DecodeScratch& s, std::int64_t b, std::int64_t kv0, std::int64_t chunk, std::int64_t split,
                 float* part_out, float* part_lse) {
  constexpr bool kPairs = kDot != Bf16Dot::off;
  const UnitRows ur = unit_rows(p, plan, b, chunk);
  if (ur.rows == 0) return;
  const std::int64_t heads = std::min(plan.heads_per_unit, p.num_kv_heads - kv0);
  const std::int64_t group = p.group_size(), d = p.head_dim, dp = g.dp;
  const SequenceKeys keys(p, cache, b);
  const std::int64_t len_q = p.q_len(b), len_k = keys.length();
  const SequenceMask mask = p.mask_for(len_q, len_k);
  const std::int64_t t_first = ur.r0 / group, t_last = (ur.r0 + ur.rows - 1) / group;
  const std::int64_t kb = mask.key_begin(t_first), ke = std::max(kb, mask.key_end(t_last + 1));
  const std::int64_t per = round_up((ke - kb + plan.splits - 1) / plan.splits, 16);
  const std::int64_t k_begin = std::min(ke, kb + split * per), k_end = std::min(ke, k_begin + per);

  // Q rows of every head (state row x = head offset * g.rows + i); padding columns stay 0 from
  // the scratch's first zeroing.
  const std::size_t elem = elem_bytes(p.dtype);
  const char* qbase = static_cast<const char*>(p.q.data);
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    for (std::int64_t i = 0; i < ur.rows; ++i) {
      const std::int64_t x = hh * g.rows + i;
      const std::int64_t r = ur.r0 + i, t = r / group, h = (kv0 + hh) * group + r % group;
      const char* src = qbase + static_cast<std::size_t>(p.offset_q(p.q, b, t, h)) * elem;
      if constexpr (kPairs) {
        std::memcpy(reinterpret_cast<std::uint16_t*>(s.q) + x * dp, src, static_cast<std::size_t>(d) * 2);
      } else {
        simd::load_row<V>(src, p.dtype, d, 1.0f, s.q + x * dp);
      }
      simd::zero_row<V>(s.acc + x * dp, dp);
      s.row_max[x] = -std::numeric_limits<float>::infinity();
      s.row_sum[x] = 0.0f;
    }
  }

  const float scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : p.softmax_scale * kLog2e;
  const float cap = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;
  const char* kdata = static_cast<const char*>(p.k.data);
  const char* vdata = static_cast<const char*>(p.v.data);

  TileRows tr;
  int cur = 0;
  if (k_begin < k_end) keys.rows(k_begin, std::min(g.bk, k_end - k_begin), tr.k[cur], tr.v[cur]);
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += g.bk) {
    const std::int64_t kn = std::min(g.bk, k_end - k0);
    const std::int64_t next = std::min(g.bk, k_end - k0 - kn);
    if (next > 0) keys.rows(k0 + kn, next, tr.k[1 - cur], tr.v[1 - cur]);
    const std::int64_t* k_off = tr.k[cur];
    const std::int64_t* v_off = tr.v[cur];
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      const std::int64_t kh = kv0 + hh;
      const char* k_head = kdata + static_cast<std::size_t>(kh * p.k.stride.head) * elem;
      const char* v_head = vdata + static_cast<std::size_t>(kh * p.v.stride.head) * elem;
      for (std::int64_t j = 0; j < kn; ++j) {
        simd::load_row<V>(v_head + static_cast<std::size_t>(v_off[j]) * elem, p.dtype, d, 1.0f, s.v_tile + j * dp);
        if constexpr (!kPairs) {
          simd::load_row<V>(k_head + static_cast<std::size_t>(k_off[j]) * elem, p.dtype, d, 1.0f, s.k_tile + j * dp);
        }
      }
      for (std::int64_t i = 0; i < ur.rows; ++i) {
        const std::int64_t x = hh * g.rows + i;
        const std::int64_t t = (ur.r0 + i) / group;
        const std::int64_t lo = std::max<std::int64_t>(mask.key_begin(t) - k0, 0);
        const std::int64_t hi = std::min<std::int64_t>(mask.key_end(t + 1) - k0, kn);
        float* srow = s.scores + i * g.bk;
        if (lo >= hi) {  // no key of this tile is visible to the row: P row 0
          std::memset(srow, 0, static_cast<std::size_t>(kn) * sizeof(float));
          continue;
        }
        if constexpr (kPairs) {
          score_row_pairs<V, kDot == Bf16Dot::native>(reinterpret_cast<const std::uint16_t*>(s.q) + x * dp,
                                                      reinterpret_cast<const std::uint16_t*>(k_head), k_off, d, kn,
                                                      srow);
        } else {
          score_row_f32<V>(s.q + x * dp, s.k_tile, dp, kn, srow);
        }
        const float alpha = softmax_row<V>(srow, kn, lo, hi, scale, cap, s.row_max[x], s.row_sum[x]);
        if (alpha != 1.0f) simd::scale_row<V>(s.acc + x * dp, dp, alpha);
      }
      accumulate_pv<V>(s.acc + hh * g.rows * dp, ur.rows, dp, s.scores, g.bk, s.v_tile, kn);
      if (next > 0) {
        const std::int64_t row_bytes = d * static_cast<std::int64_t>(elem);
        prefetch_rows(k_head, tr.k[1 - cur], elem, next, row_bytes);
        prefetch_rows(v_head, tr.v[1 - cur], elem, next, row_bytes);
      }
    }
    cur = 1 - cur;
  }

  write_partials<V>(s, heads, g.rows, ur.rows, d, dp, part_out, part_lse);
}

// ---- AMX form (plan.amx != off: bf16, head_dim % 32 == 0, >= kDecodeAmxMinRows rows per head) --
// Per head and key tile, with Rp = the unit's rows rounded up to 16 (g.rows) and m = kn rounded
// up to 32:
//   S^T (m, Rp) f32   = K_tile (m, d) bf16 [rows read in place; a short last tile is staged,
//                        zero-padded] x Q^T (d, Rp) [VNNI pairs, packed once per unit]
//   column-wise online softmax (one lane per row), masked keys and keys past kn -inf
//   P (Rp, m) bf16    = transpose of the probabilities, rounded to bf16 (as the GPU kernels)
//   O (Rp, d) f32    += P x V_tile (m, d) [VNNI pairs of consecutive keys, packed per tile]
// both products on amx::gemm_bf16<E> (native tiles, or their exact emulation).
template <class V, class E>
void decode_unit_amx(const AttentionProblem& p, const DecodeKeys* cache, const DecodePlan& plan,
                     const DecodeGeometry& g, const DecodeScratch& s, std::int64_t b, std::int64_t kv0,
                     std::int64_t chunk, std::int64_t split, float* part_out, float* part_lse) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  const UnitRows ur = unit_rows(p, plan, b, chunk);
  if (ur.rows == 0) return;
  const std::int64_t heads = std::min(plan.heads_per_unit, p.num_kv_heads - kv0);
  const std::int64_t group = p.group_size(), d = p.head_dim, dp = g.dp, rp = g.rows, d2 = d / 2;
  const SequenceKeys keys(p, cache, b);
  const std::int64_t len_q = p.q_len(b), len_k = keys.length();
  const SequenceMask mask = p.mask_for(len_q, len_k);
  const std::int64_t t_first = ur.r0 / group, t_last = (ur.r0 + ur.rows - 1) / group;
  const std::int64_t kb = mask.key_begin(t_first), ke = std::max(kb, mask.key_end(t_last + 1));
  const std::int64_t per = round_up((ke - kb + plan.splits - 1) / plan.splits, 16);
  const std::int64_t k_begin = std::min(ke, kb + split * per), k_end = std::min(ke, k_begin + per);
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // Q^T pairs per head: qt[hh] (d / 2, rp) words, word (c, n) = Q row n's word c; rows past
  // ur.rows are 0. Visible key interval of each column.
  auto* qt = reinterpret_cast<std::uint32_t*>(s.q);
  const auto* qsrc = static_cast<const std::uint16_t*>(p.q.data);
  std::int64_t lo_col[kDecodeMaxRows + 16], hi_col[kDecodeMaxRows + 16];
  for (std::int64_t i = 0; i < rp; ++i) {
    const std::int64_t t = (ur.r0 + std::min(i, ur.rows - 1)) / group;
    lo_col[i] = i < ur.rows ? mask.key_begin(t) : 0;
    hi_col[i] = i < ur.rows ? mask.key_end(t + 1) : 0;
  }
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    std::uint32_t* q = qt + hh * d2 * rp;
    for (std::int64_t i = 0; i < rp; ++i) {
      const std::int64_t r = ur.r0 + i, t = r / group, h = (kv0 + hh) * group + r % group;
      const std::uint16_t* row = i < ur.rows ? qsrc + p.offset_q(p.q, b, t, h) : nullptr;
      for (std::int64_t c = 0; c < d2; ++c) {
        std::uint32_t w = 0;
        if (row) std::memcpy(&w, row + 2 * c, 4);
        q[c * rp + i] = w;
      }
    }
    for (std::int64_t i = 0; i < rp; ++i) {
      simd::zero_row<V>(s.acc + (hh * rp + i) * dp, dp);
      s.row_max[hh * rp + i] = neg_inf;
      s.row_sum[hh * rp + i] = 0.0f;
    }
  }

  const float scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : p.softmax_scale * kLog2e;
  const float cap = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;
  const auto* kdata = static_cast<const std::uint16_t*>(p.k.data);
  const auto* vdata = static_cast<const std::uint16_t*>(p.v.data);
  const std::int64_t k_stride = p.k.stride.token;
  float* st = s.scores;                                                // (bk, rp) f32
  auto* pm = reinterpret_cast<std::uint16_t*>(s.k_tile);               // (rp, bk) bf16
  auto* vp = reinterpret_cast<std::uint32_t*>(s.v_tile);               // (bk / 2, d) words
  auto* kst = reinterpret_cast<std::uint16_t*>(s.v_tile + g.bk * dp / 2);  // (bk, d) bf16

  TileRows tr;
  int cur = 0;
  if (k_begin < k_end) tr.runs[cur] = keys.rows(k_begin, std::min(g.bk, k_end - k_begin), tr.k[cur], tr.v[cur]);
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += g.bk) {
    const std::int64_t kn = std::min(g.bk, k_end - k0), m = round_up(kn, 32);
    const std::int64_t next = std::min(g.bk, k_end - k0 - kn);
    if (next > 0) tr.runs[1 - cur] = keys.rows(k0 + kn, next, tr.k[1 - cur], tr.v[1 - cur]);
    const std::int64_t* k_off = tr.k[cur];
    const std::int64_t* v_off = tr.v[cur];
    bool partial = kn < m;
    for (std::int64_t i = 0; i < ur.rows && !partial; ++i) partial = lo_col[i] > k0 || hi_col[i] < k0 + kn;
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      const std::int64_t kh = kv0 + hh;
      const std::uint16_t* k_head = kdata + kh * p.k.stride.head;
      const std::uint16_t* v_head = vdata + kh * p.v.stride.head;
      const std::uint16_t* k_rows = k_head + k_off[0];
      std::int64_t lda = k_stride;
      const RowRuns runs = tr.runs[cur];
      if (kn == m && !runs.uniform && runs.uniform16) {
        // Pages of a multiple of 16 tokens: each 16-row tile of K read in place from its page.
        for (std::int64_t g0 = 0; g0 < m; g0 += 16) {
          amx::gemm_bf16<E>(16, rp, d, k_head + k_off[g0], k_stride, qt + hh * d2 * rp, rp, st + g0 * rp, rp, false);
        }
      } else {
        if (kn < m || !runs.uniform) {
          // Stage a short tile (zero rows after kn), or one whose rows are not one stride apart
          // (it crosses into a page elsewhere in memory).
          for (std::int64_t j = 0; j < m; ++j) {
            if (j < kn) {
              std::memcpy(kst + j * d, k_head + k_off[j], static_cast<std::size_t>(d) * 2);
            } else {
              std::memset(kst + j * d, 0, static_cast<std::size_t>(d) * 2);
            }
          }
          k_rows = kst;
          lda = d;
        }
        amx::gemm_bf16<E>(m, rp, d, k_rows, lda, qt + hh * d2 * rp, rp, st, rp, false);
      }
      // V pairs: word (r, c) = (V[2r][c], V[2r + 1][c]); keys past kn are 0.
      for (std::int64_t r = 0; r < m / 2; ++r) {
        const std::uint16_t* v0 = 2 * r < kn ? v_head + v_off[2 * r] : nullptr;
        const std::uint16_t* v1 = 2 * r + 1 < kn ? v_head + v_off[2 * r + 1] : nullptr;
        std::uint32_t* out = vp + r * d;
        for (std::int64_t c = 0; c < d; ++c) {
          out[c] = (v0 ? v0[c] : 0u) | (static_cast<std::uint32_t>(v1 ? v1[c] : 0u) << 16);
        }
      }
      // Scale, soft-cap, mask (columns: rows of the unit; keys past kn and invisible keys -inf).
      const vec sc = V::set1(scale), cp = V::set1(cap);
      for (std::int64_t j = 0; j < m; ++j) {
        for (std::int64_t c0 = 0; c0 < rp; c0 += W) {
          vec x = V::mul(V::load(st + j * rp + c0), sc);
          if (cap > 0.0f) x = V::mul(cp, simd::tanh<V>(x));
          V::store(st + j * rp + c0, x);
        }
      }
      if (partial) {
        for (std::int64_t j = 0; j < m; ++j) {
          const std::int64_t key = k0 + j;
          for (std::int64_t i = 0; i < rp; ++i) {
            if (j >= kn || key < lo_col[i] || key >= hi_col[i]) st[j * rp + i] = neg_inf;
          }
        }
      }
      // Online softmax per column, W columns at a time.
      float* row_max = s.row_max + hh * rp;
      float* row_sum = s.row_sum + hh * rp;
      alignas(64) float alpha[kDecodeMaxRows + 16];
      for (std::int64_t c0 = 0; c0 < rp; c0 += W) {
        const vec m_old = V::load(row_max + c0);
        vec m_new = m_old;
        for (std::int64_t j = 0; j < m; ++j) m_new = V::max(m_new, V::load(st + j * rp + c0));
        const vec m_use = V::select_eq(m_new, V::set1(neg_inf), V::zero(), m_new);
        vec sum = V::zero();
        for (std::int64_t j = 0; j < m; ++j) {
          const vec pj = simd::exp2<V>(V::sub(V::load(st + j * rp + c0), m_use));
          V::store(st + j * rp + c0, pj);
          sum = V::add(sum, pj);
        }
        const vec a = simd::exp2<V>(V::sub(m_old, m_use));
        V::store(alpha + c0, a);
        V::store(row_sum + c0, V::fmadd(a, V::load(row_sum + c0), sum));
        V::store(row_max + c0, m_new);
      }
      float* acc = s.acc + hh * rp * dp;
      for (std::int64_t i = 0; i < rp; ++i) {
        if (alpha[i] != 1.0f) simd::scale_row<V>(acc + i * dp, dp, alpha[i]);
      }
      // P (rp, m) bf16 = transpose of st, rounded to nearest even.
      for (std::int64_t i = 0; i < rp; ++i) {
        for (std::int64_t j = 0; j < m; ++j) pm[i * m + j] = float_to_bf16_bits(st[j * rp + i]);
      }
      amx::gemm_bf16<E>(rp, d, m, pm, m, vp, d, acc, dp, true);
      if (next > 0) {
        prefetch_rows(reinterpret_cast<const char*>(k_head), tr.k[1 - cur], 2, next, d * 2);
        prefetch_rows(reinterpret_cast<const char*>(v_head), tr.v[1 - cur], 2, next, d * 2);
      }
    }
    cur = 1 - cur;
  }

  write_partials<V>(s, heads, rp, ur.rows, d, dp, part_out, part_lse);
}

// Folds the splits of (b, kv_head, chunk) in split order with merge_states' weights and writes
// out (output dtype) and lse. tmp: head_dim floats.
template <class V>
void merge_and_write(const AttentionProblem& p, const DecodePlan& plan, const DecodeGeometry& g, std::int64_t b,
                     std::int64_t kv_head, std::int64_t chunk, const float* parts_out, const float* parts_lse,
                     float* tmp) {
  const UnitRows ur = unit_rows(p, plan, b, chunk);
  const std::int64_t group = p.group_size(), d = p.head_dim;
  const std::int64_t block = kv_head / plan.heads_per_unit, hh = kv_head % plan.heads_per_unit;
  const std::int64_t first_unit = ((b * plan.head_blocks + block) * plan.row_chunks + chunk) * plan.splits;
  const std::size_t elem = elem_bytes(p.dtype);
  char* out = static_cast<char*>(p.out.data);
  for (std::int64_t i = 0; i < ur.rows; ++i) {
    const std::int64_t r = ur.r0 + i, t = r / group, h = kv_head * group + r % group;
    float lse = -std::numeric_limits<float>::infinity();
    simd::zero_row<V>(tmp, d);
    for (std::int64_t sp = 0; sp < plan.splits; ++sp) {
      const std::int64_t row = ((first_unit + sp) * plan.heads_per_unit + hh) * g.rows + i;
      const MergeWeights<float> w = merge_weights(lse, parts_lse[row]);
      const float* o = parts_out + row * g.dp;
      if (w.weight_b == 0.0f && w.weight_a == 1.0f) continue;  // the split adds nothing
      for (std::int64_t c = 0; c < d; ++c) tmp[c] = weighted(w.weight_a, tmp[c]) + weighted(w.weight_b, o[c]);
      lse = w.lse;
    }
    simd::store_row<V>(tmp, 1.0f, p.dtype, d, out + static_cast<std::size_t>(p.offset_q(p.out, b, t, h)) * elem);
    if (p.lse) p.lse_row(b, h)[t * p.lse_token_stride] = lse;
  }
}

// Entry point of one ISA and dot-product form: all units over OpenMP threads, then the merge.
// The AMX tile configuration for the life of a thread's share of the call (nothing for void).
template <class E>
struct TileScopeFor {
  amx::TileScope<E> scope{amx::gemm_config()};
};
template <>
struct TileScopeFor<void> {};

// Amx: void (vector dot products) or an amx engine (amx::Native / amx::Emulated).
// cache: a KV cache's pages and lengths (null: p's K/V). buffers: the caller's scratch
// (decode_scratch_size), or null members to take it from the host pools.
template <class V, Bf16Dot kDot, class Amx = void>
void run_decode(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                const DecodeBuffers& buffers) {
  if (p.batch == 0 || p.num_heads == 0 || p.seqlen_q == 0) return;
  constexpr bool kAmx = !std::is_void_v<Amx>;
  const DecodeGeometry g = decode_geometry(p, plan);
  const DecodeScratchSize size = decode_scratch_size(p, plan);
  const std::int64_t units = p.batch * plan.head_blocks * plan.row_chunks * plan.splits;
  const std::int64_t seq_units = p.batch * p.num_kv_heads * plan.row_chunks;  // merged rows' owners
  const std::int64_t unit_rows_all = plan.heads_per_unit * g.rows;
  const std::size_t part_rows = static_cast<std::size_t>(units * unit_rows_all);
  std::optional<HostScratch> pooled;
  float* parts_out = buffers.parts;
  if (parts_out == nullptr) {
    pooled.emplace(nullptr, size.parts_bytes);
    parts_out = static_cast<float*>(pooled->data());
  }
  float* parts_lse = parts_out + part_rows * static_cast<std::size_t>(g.dp);

  std::exception_ptr error;
#pragma omp parallel num_threads(plan.threads)
  {
    float* scratch = nullptr;
    try {
      scratch = buffers.threads != nullptr
                    ? buffers.threads + static_cast<std::size_t>(omp_get_thread_num()) * (size.thread_bytes / sizeof(float))
                    : static_cast<float*>(thread_scratch(size.thread_bytes));
      std::memset(scratch, 0, size.thread_bytes);
    } catch (...) {
#pragma omp critical(fastattn_decode_error)
      if (!error) error = std::current_exception();
    }
    const DecodeScratch s = scratch ? carve(g, scratch) : DecodeScratch{};
    [[maybe_unused]] const TileScopeFor<Amx> tiles;  // ldtilecfg per thread and call
    // Units: (b, head block, chunk) outermost, splits innermost.
#pragma omp for schedule(dynamic)
    for (std::int64_t u = 0; u < units; ++u) {
      if (!scratch) continue;
      const std::int64_t split = u % plan.splits, su = u / plan.splits;
      const std::int64_t chunk = su % plan.row_chunks, bh = su / plan.row_chunks;
      const std::int64_t block = bh % plan.head_blocks, b = bh / plan.head_blocks;
      if constexpr (kAmx) {
        decode_unit_amx<V, Amx>(p, cache, plan, g, s, b, block * plan.heads_per_unit, chunk, split,
                                parts_out + u * unit_rows_all * g.dp, parts_lse + u * unit_rows_all);
      } else {
        decode_unit<V, kDot>(p, cache, plan, g, s, b, block * plan.heads_per_unit, chunk, split,
                             parts_out + u * unit_rows_all * g.dp, parts_lse + u * unit_rows_all);
      }
    }
#pragma omp for schedule(static)
    for (std::int64_t su = 0; su < seq_units; ++su) {
      if (!scratch) continue;
      const std::int64_t chunk = su % plan.row_chunks, bh = su / plan.row_chunks;
      merge_and_write<V>(p, plan, g, bh / p.num_kv_heads, bh % p.num_kv_heads, chunk, parts_out, parts_lse,
                         s.k_tile);
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::decode_detail
