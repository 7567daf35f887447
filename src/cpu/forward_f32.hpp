// forward_f32.hpp — the f32 operand format of the CPU forward kernel (forward_kernel.hpp's
// Ops policy): Q^T packed as f32 GEMM B panels (pre-scaled), K and V as contiguous f32 rows
// (forward_kv.hpp), both products on the FMA micro-kernels of tile_gemm.hpp. Every input dtype
// and every ISA uses it, except bf16 on CPUs with AVX-512 BF16 (forward_bf16.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "cpu/forward_kernel.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

// Q rows [q0, q0 + rows) of head h -> panels (head_dim, cols), times q_scale; padded columns
// are zero. staging (rows, head_dim) receives the f32 rows first.
template <class V>
void pack_query_block(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                      std::int64_t rows, std::int64_t cols, float q_scale, float* staging,
                      float* panels) {
  const std::int64_t d = p.head_dim;
  const std::size_t elem = element_bytes(p.dtype);
  const char* q = static_cast<const char*>(p.q.data);
  for (std::int64_t i = 0; i < rows; ++i) {
    const char* row = q + static_cast<std::size_t>(p.offset_q(p.q, b, q0 + i, h)) * elem;
    simd::load_row<V>(row, p.dtype, d, q_scale, staging + i * d);
  }
  gemm::pack_transposed<V>(staging, d, rows, d, cols, panels);
}

// scores (kn, cols) = k_tile (kn, d) * Q^T (d, cols). On a partial tile each panel of queries
// multiplies only the keys some query of the panel can see (the diagonal's far corner is
// skipped); the entries left out are invisible to the whole panel, so apply_mask overwrites
// them with -inf.
template <class V>
void score_tile(const AttentionProblem& p, const SubBlock& sb, float* scores, const float* k_tile,
                const SequenceMask& mask, std::int64_t k0, std::int64_t kn, TileClass tile) {
  constexpr std::int64_t P = gemm::panel_width<V>();
  const std::int64_t d = p.head_dim;
  if (tile == TileClass::full) {
    gemm::tile_gemm<V>(kn, sb.cols, d, gemm::MatrixA{k_tile, d, gemm::Layout::row_major},
                       gemm::packed_b<V>(sb.q_panels, d), scores, sb.cols, /*accumulate=*/false);
    return;
  }
  for (std::int64_t j0 = 0; j0 < sb.cols; j0 += P) {
    const std::int64_t kb = std::max(k0, mask.key_begin(sb.q0 + j0));
    const std::int64_t ke = std::min(k0 + kn, mask.key_end(sb.q0 + j0 + P));
    if (kb >= ke) continue;
    const gemm::MatrixA keys{k_tile + (kb - k0) * d, d, gemm::Layout::row_major};
    gemm::tile_gemm<V>(ke - kb, P, d, keys, gemm::packed_b<V>(sb.q_panels + j0 * d, d),
                       scores + (kb - k0) * sb.cols + j0, sb.cols, /*accumulate=*/false);
  }
}

// acc (acc_rows, d) += P (acc_rows, kn) * v_tile (kn, d), with P(i, j) = scores[j * cols + i].
// On a partial tile each block of kGemmRows queries sums only over the keys one of them can
// see: the other weights are exactly 0.
template <class V>
void accumulate_values(const AttentionProblem& p, const SubBlock& sb, const float* scores,
                       const float* v_tile, const SequenceMask& mask, std::int64_t k0,
                       std::int64_t kn, TileClass tile) {
  constexpr std::int64_t MR = V::kGemmRows;
  const std::int64_t d = p.head_dim;
  if (tile == TileClass::full) {
    gemm::tile_gemm<V>(sb.acc_rows, d, kn, gemm::MatrixA{scores, sb.cols, gemm::Layout::col_major},
                       gemm::row_major_b<V>(v_tile, d), sb.acc, d, /*accumulate=*/true);
    return;
  }
  for (std::int64_t i0 = 0; i0 < sb.acc_rows; i0 += MR) {
    const std::int64_t kb = std::max(k0, mask.key_begin(sb.q0 + i0));
    const std::int64_t ke = std::min(k0 + kn, mask.key_end(sb.q0 + i0 + MR));
    if (kb >= ke) continue;
    const gemm::MatrixA weights{scores + (kb - k0) * sb.cols + i0, sb.cols,
                                gemm::Layout::col_major};
    gemm::tile_gemm<V>(MR, d, ke - kb, weights, gemm::row_major_b<V>(v_tile + (kb - k0) * d, d),
                       sb.acc + i0 * d, d, /*accumulate=*/true);
  }
}

// forward_kernel.hpp's Ops policy for f32 operands.
template <class V>
struct F32Operands {
  using Kv = KvRows;
  using Plan = KvPlan;

  static Kv stage_kv(const AttentionProblem& p, const Plan& plan, std::int64_t c0, std::int64_t c1, void* packed) {
    return plan.in_place ? kv_in_place(p) : pack_kv_heads<V>(p, c0, c1, static_cast<float*>(packed));
  }

  static void pack_query_block(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t q0,
                               std::int64_t rows, std::int64_t cols, float q_scale, float* staging,
                               float* panels) {
    forward_detail::pack_query_block<V>(p, b, h, q0, rows, cols, q_scale, staging, panels);
  }

  // The inner level for one (sub-block, K/V tile) pair: scores, mask, online softmax, O += P V.
  // Keys [k_lo, k_lo + kn) of sequence b, KV head kv_head: K_tile, V_tile (kn, head_dim) f32
  // rows, head_dim apart, read in place. Q was scaled when packed.
  static void attend_tile(const AttentionProblem& p, const SubBlock& sb, const ForwardScratch& s, const Kv& kv,
                          std::int64_t b, std::int64_t kv_head, float /*q_scale*/, const SequenceMask& mask,
                          std::int64_t k_lo, std::int64_t kn, TileClass tile) {
    const float* k_tile = kv.k_row(p, b, k_lo, kv_head);
    const float* v_tile = kv.v_row(p, b, k_lo, kv_head);
    float* scores = s.scores;
    score_tile<V>(p, sb, scores, k_tile, mask, k_lo, kn, tile);
    if (p.softcap > 0.0f) apply_softcap<V>(scores, sb.cols, kn, sb.cols, p.softcap * kLog2e);
    if (tile == TileClass::partial) apply_mask(scores, sb.cols, kn, sb.cols, mask, sb.q0, k_lo);
    online_softmax_update<V>(scores, sb.cols, kn, sb.cols, sb.row_max, sb.row_sum, sb.alpha);
    rescale_accumulator<V>(sb.acc, p.head_dim, sb.acc_rows, sb.alpha);
    accumulate_values<V>(p, sb, scores, v_tile, mask, k_lo, kn, tile);
  }
};

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
