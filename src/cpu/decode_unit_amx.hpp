// decode_unit_amx.hpp — the AMX form of the CPU decode kernel's work unit (decode_kernel.hpp):
// both products of a unit on AMX tiles (native, or emulated for tests).
#pragma once

#include "cpu/decode_tiles.hpp"  // first: simd.hpp includes <immintrin.h> with a GCC warning workaround

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/mask.hpp"
#include "cpu/amx.hpp"

namespace fastattn::cpu::decode_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

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

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::decode_detail
