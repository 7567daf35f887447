// forward_softmax.hpp — score post-processing of the CPU forward: soft-cap, the tiling-mask on
// partial tiles, and the online-softmax update (FlashAttention-2, base 2).
//
// All functions work on the transposed score tile of one (query block, key tile) pair:
//   scores: (kn, ld) f32 row-major, row j = key k0 + j, column i = query q0 + i
// so the per-query statistics (running max, running sum, rescale factor) are vectors over
// columns and every reduction over keys is a lane-wise max/add down the rows: no horizontal
// reductions. Scores arrive in log2 units (log2(e) is folded into the Q scale), so
// softmax weights are exp2(s - m).
#pragma once

#include <cstdint>
#include <limits>

#include "common/mask.hpp"
#include "cpu/simd.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

// s = cap * tanh(s) on columns [0, ncols) (a multiple of kWidth) of kn rows. The caller
// pre-scaled Q by scale / softcap, so s = scale * q.k / softcap here, and cap is
// softcap * log2(e): the result is the soft-capped score in log2 units.
template <class V>
void apply_softcap(float* scores, std::int64_t ld, std::int64_t kn, std::int64_t ncols, float cap) {
  constexpr int W = V::kWidth;
  const typename V::vec c = V::set1(cap);
  for (std::int64_t j = 0; j < kn; ++j) {
    float* row = scores + j * ld;
    for (std::int64_t i = 0; i < ncols; i += W) {
      V::store(row + i, V::mul(c, simd::tanh<V>(V::load(row + i))));
    }
  }
}

// Sets invisible (query, key) scores of a partial tile to -inf. For key kj the visible queries
// form one interval (see SequenceMask::visible):
//   kj - offset - right <= qi <= kj - offset + left     (each bound only when >= 0)
// so each row is two fills, with no per-element inequality tests.
inline void apply_mask(float* scores, std::int64_t ld, std::int64_t kn, std::int64_t ncols,
                       const SequenceMask& mask, std::int64_t q0, std::int64_t k0) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::int64_t j = 0; j < kn; ++j) {
    const std::int64_t kj = k0 + j;
    std::int64_t lo = 0, hi = ncols;  // visible columns: [lo, hi)
    if (mask.right >= 0) {
      const std::int64_t b = kj - mask.offset - mask.right - q0;
      lo = b > lo ? b : lo;
    }
    if (mask.left >= 0) {
      const std::int64_t e = kj - mask.offset + mask.left - q0 + 1;
      hi = e < hi ? e : hi;
    }
    float* row = scores + j * ld;
    if (lo >= hi) {
      for (std::int64_t i = 0; i < ncols; ++i) row[i] = neg_inf;
      continue;
    }
    for (std::int64_t i = 0; i < lo; ++i) row[i] = neg_inf;
    for (std::int64_t i = hi; i < ncols; ++i) row[i] = neg_inf;
  }
}

// One online-softmax step over a tile of kn keys, for query columns [0, ncols) (a multiple of
// kGemmVectors * kWidth):
//   m_new = max(m, max_j s_j)                  (running max, log2 units)
//   m_use = m_new, or 0 while the row has seen no visible key (m_new = -inf), so that
//           exp2(-inf - m_use) = 0 instead of exp2(-inf + inf) = NaN
//   p_j   = exp2(s_j - m_use), written over s_j (the P^T tile for the P*V product)
//   alpha = exp2(m - m_use)                    (factor for the old O and l; 1 if m unchanged)
//   l     = alpha * l + sum_j p_j
// The caller then scales row i of O by alpha[i] where alpha[i] != 1.
template <class V>
void online_softmax_update(float* scores, std::int64_t ld, std::int64_t kn, std::int64_t ncols,
                           float* row_max, float* row_sum, float* alpha) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  constexpr int G = V::kGemmVectors;  // column vectors per pass: independent dependency chains
  const vec neg_inf = V::set1(-std::numeric_limits<float>::infinity());
  for (std::int64_t c0 = 0; c0 < ncols; c0 += G * W) {
    vec m_old[G], m_new[G], m_use[G], sum[G];
    for (int g = 0; g < G; ++g) m_old[g] = m_new[g] = V::load(row_max + c0 + g * W);
    for (std::int64_t j = 0; j < kn; ++j) {
      const float* row = scores + j * ld + c0;
      for (int g = 0; g < G; ++g) m_new[g] = V::max(m_new[g], V::load(row + g * W));
    }
    for (int g = 0; g < G; ++g) {
      m_use[g] = V::select_eq(m_new[g], neg_inf, V::zero(), m_new[g]);
      sum[g] = V::zero();
    }
    for (std::int64_t j = 0; j < kn; ++j) {
      float* row = scores + j * ld + c0;
      for (int g = 0; g < G; ++g) {
        const vec pj = simd::exp2<V>(V::sub(V::load(row + g * W), m_use[g]));
        V::store(row + g * W, pj);
        sum[g] = V::add(sum[g], pj);
      }
    }
    for (int g = 0; g < G; ++g) {
      const vec a = simd::exp2<V>(V::sub(m_old[g], m_use[g]));
      V::store(alpha + c0 + g * W, a);
      V::store(row_sum + c0 + g * W, V::fmadd(a, V::load(row_sum + c0 + g * W), sum[g]));
      V::store(row_max + c0 + g * W, m_new[g]);
    }
  }
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
