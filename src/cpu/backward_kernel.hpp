// backward_kernel.hpp — the CPU FlashAttention-2 backward pass, templated on the SIMD traits.
//
// backward.cpp (plain flags) owns the parallel plan and calls the per-ISA kernels below through
// a BackwardKernels table; backward_avx2.cpp / backward_avx512.cpp instantiate the templates.
// The kernels have three roles:
//
//   1. stage_rows (pre-pass, per group = (sequence, KV head)): copies the group's q and dout
//      rows to contiguous f32 and computes D_i = sum_d dout_id * out_id and lse_i * log2(e).
//   2. kv_block (main loop): one work unit = (sequence b, KV head, block of block_k keys).
//      It loads K and V once (f32 rows and packed K^T / V^T panels), keeps the dK and dV
//      accumulators of the block resident, and walks the query heads of the GQA group and the
//      query blocks whose mask window reaches the keys (SequenceMask::classify: empty tiles are
//      skipped, full tiles do no mask work). Per (query block, key block), in log2 units:
//        S  = Q K^T                                   s, ds: (block_q, ld_s) f32, row-major
//        P  = exp2(S * scale * log2e - lse * log2e)   soft-cap: c * tanh(S * scale / c) inside
//        dV += P^T dO          dP = dO V^T
//        dS = scale * P * (dP - D)                    soft-cap: times (1 - tanh^2)
//        dK += dS^T Q          dQ += dS K             (scale folded into dS once)
//      dQ rows go to the f32 accumulator the caller passes (private rows or a split's partial).
//   3. store_dq (epilogue): sums a row's dQ partials in a fixed order and writes dq.
//
// Rows that see no key (lse = -inf) get P = 0: their lse is replaced by +inf, so
// exp2(s - inf) = 0 with no NaN. Score columns past the last key of a block are computed
// (zero K^T padding keeps the products in whole panels) but never read by a product.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "common/mask.hpp"
#include "common/problem.hpp"
#include "cpu/simd.hpp"
#include "cpu/tile_gemm.hpp"

namespace fastattn::cpu::backward_detail {

// ---- interface with backward.cpp ------------------------------------------------------------

// The query-side rows of one group (sequence b, KV head): its group_size query heads, staged
// by stage_rows as contiguous f32 so the units re-read them without a page walk per row (the
// caller's rows are a token stride apart, usually one page each).
struct GroupRows {
  float* q = nullptr;      // (group_size, len_q, head_dim)
  float* dout = nullptr;   // (group_size, len_q, head_dim)
  float* lse = nullptr;    // (group_size, len_q): lse * log2(e); +inf where lse = -inf
  float* delta = nullptr;  // (group_size, len_q): D = dout . out
  std::int64_t len_q = 0;
};

// One work unit: keys [k0, k0 + block_k) (clipped to the sequence) of (sequence b, kv_head).
struct KvBlockUnit {
  std::int64_t b = 0;
  std::int64_t kv_head = 0;
  std::int64_t k0 = 0;
  std::int64_t block_q = 0;  // query rows per inner step
  std::int64_t block_k = 0;  // keys per unit
  GroupRows rows;            // staged rows of the unit's group
  float* dq = nullptr;       // f32 dQ accumulator (group_size, len_q, head_dim); added to
  float* scratch = nullptr;  // scratch_bytes(head_dim, block_q, block_k), 64-byte aligned
};

// The kernels of one ISA.
struct BackwardKernels {
  // Role 1: rows, lse and D of tokens [t0, t1) of every query head of group (b, kv_head).
  void (*stage_rows)(const AttentionProblem& p, std::int64_t b, std::int64_t kv_head,
                     std::int64_t t0, std::int64_t t1, const GroupRows& rows);
  // Floats of each of the q and dout regions of a slot, for `group` heads of up to len_q tokens
  // (the layout of those regions is the kernels' own; lse and D follow as f32 rows).
  std::int64_t (*staged_row_floats)(std::int64_t group, std::int64_t len_q, std::int64_t head_dim);
  // Per-thread scratch of kv_block.
  std::size_t (*scratch_bytes)(std::int64_t head_dim, std::int64_t block_q, std::int64_t block_k);
  // Role 2: dk, dv of the unit's keys (written in the problem dtype) and dQ partial sums.
  void (*kv_block)(const AttentionProblem& p, const KvBlockUnit& unit);
  // Role 3: dq(b, t, h) for tokens [t0, t1) = sum over s in [0, nparts) of the f32 rows
  // acc[s * part_stride + (t - t0) * head_dim], summed in order of s into part 0 (clobbered).
  void (*store_dq)(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t t0,
                   std::int64_t t1, float* acc, std::int64_t nparts, std::int64_t part_stride);
};

BackwardKernels backward_kernels_avx2();
#if FASTATTN_HAVE_AVX512
BackwardKernels backward_kernels_avx512();
// The bf16 AMX kernels (backward_amx.hpp): native tiles, or their emulated twin (any AVX-512 CPU).
BackwardKernels backward_kernels_amx(bool native);
#endif

// ---- the kernels, instantiated per ISA -------------------------------------------------------
// Non-template helpers live in a per-ISA inline namespace (see simd.hpp).
inline namespace FASTATTN_SIMD_NAMESPACE {

constexpr float kLog2e = 1.44269504088896341f;

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }

// Tile shapes of one unit and its scratch, all f32, each region whole cache lines:
//   rows:     (block_k, head_dim)   K or V rows as read, before packing
//   k:        K as B panels         (block_k, ld_d)  for dQ += dS K
//   kt, vt:   K^T, V^T as B panels  (head_dim, ld_s) for S = Q K^T and dP = dO V^T
//   dk, dv:   (block_k, head_dim)   accumulators of the unit
//   s:        (block_q, ld_s)       scores, then P
//   ds:       (block_q, ld_s)       dP, then dS
//   capgrad:  (block_q, ld_s)       1 - tanh^2 of the soft-capped scores (soft-cap only)
// ld_s, ld_d: block_k, head_dim rounded up to the panel width. K is packed for dQ because its
// rows, head_dim floats apart, would map a panel's block_k lines onto a few L1 sets (d = 128:
// 512-byte stride, 8 sets x 8 ways < 96 lines) and the panel would not stay in L1.
template <class V>
struct BackwardTiles {
  static constexpr std::int64_t kPanel = gemm::panel_width<V>();
  std::int64_t head_dim, block_q, block_k, ld_s, ld_d;

  BackwardTiles(std::int64_t d, std::int64_t bq, std::int64_t bk)
      : head_dim(d),
        block_q(bq),
        block_k(bk),
        ld_s(round_up(bk, kPanel)),
        ld_d(round_up(d, kPanel)) {}

  static std::int64_t lines(std::int64_t floats) { return round_up(floats, 16); }
  std::int64_t kv_floats() const { return lines(block_k * ld_d); }
  std::int64_t panel_floats() const { return lines(head_dim * ld_s); }
  std::int64_t score_floats() const { return lines(block_q * ld_s); }
  std::int64_t total_floats() const {
    return 4 * kv_floats() + 2 * panel_floats() + 3 * score_floats();
  }
};

struct BackwardScratch {
  float *rows, *k, *kt, *vt, *dk, *dv, *s, *ds, *capgrad;
};

template <class V>
BackwardScratch carve_scratch(const BackwardTiles<V>& t, float* base) {
  BackwardScratch s{};
  float* next = base;
  auto take = [&next](std::int64_t floats) {
    float* region = next;
    next += floats;
    return region;
  };
  s.rows = take(t.kv_floats());
  s.k = take(t.kv_floats());
  s.dk = take(t.kv_floats());
  s.dv = take(t.kv_floats());
  s.kt = take(t.panel_floats());
  s.vt = take(t.panel_floats());
  s.s = take(t.score_floats());
  s.ds = take(t.score_floats());
  s.capgrad = take(t.score_floats());
  return s;
}

template <class V>
std::size_t scratch_bytes(std::int64_t head_dim, std::int64_t block_q, std::int64_t block_k) {
  return static_cast<std::size_t>(BackwardTiles<V>(head_dim, block_q, block_k).total_floats()) *
         sizeof(float);
}

// sum_i x_i * y_i over one row of n elements of dtype (f32 accumulation).
template <class V>
float row_dot(const void* x, const void* y, DType dtype, std::int64_t n) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  vec acc = V::zero();
  std::int64_t i = 0;
  const int tail = static_cast<int>(n % W);
  if (dtype == DType::f32) {
    const float* a = static_cast<const float*>(x);
    const float* c = static_cast<const float*>(y);
    for (; i + W <= n; i += W) acc = V::fmadd(V::load(a + i), V::load(c + i), acc);
    if (tail) acc = V::fmadd(V::load_partial(a + i, tail), V::load_partial(c + i, tail), acc);
  } else {
    const bool bf16 = dtype == DType::bf16;
    const std::uint16_t* a = static_cast<const std::uint16_t*>(x);
    const std::uint16_t* c = static_cast<const std::uint16_t*>(y);
    for (; i + W <= n; i += W) {
      const vec xa = bf16 ? V::load_bf16(a + i) : V::load_f16(a + i);
      const vec xc = bf16 ? V::load_bf16(c + i) : V::load_f16(c + i);
      acc = V::fmadd(xa, xc, acc);
    }
    if (tail) {
      const vec xa = bf16 ? V::load_bf16_partial(a + i, tail) : V::load_f16_partial(a + i, tail);
      const vec xc = bf16 ? V::load_bf16_partial(c + i, tail) : V::load_f16_partial(c + i, tail);
      acc = V::fmadd(xa, xc, acc);
    }
  }
  // Lanes summed through memory: GCC 12's _mm512_reduce_add_ps (V::reduce_add) trips
  // -Wuninitialized inside its own header.
  alignas(64) float lanes[W];
  V::store(lanes, acc);
  float sum = 0.0f;
  for (int lane = 0; lane < W; ++lane) sum += lanes[lane];
  return sum;
}

// Role 1, staging: for tokens [t0, t1) of every query head h of the group, the f32 q and dout
// rows, D = dout . out and lse * log2(e) (+inf for rows that see no key, so exp2(s - lse) is a
// clean 0). Rows are read token by token, all heads of a token together (memory order).
template <class V>
void stage_rows(const AttentionProblem& p, std::int64_t b, std::int64_t kv_head, std::int64_t t0,
                std::int64_t t1, const GroupRows& rows) {
  const std::int64_t d = p.head_dim;
  const std::int64_t group = p.group_size();
  const std::size_t elem = dtype_size(p.dtype);
  const char* q = static_cast<const char*>(p.q.data);
  const char* dout = static_cast<const char*>(p.dout.data);
  const char* out = static_cast<const char*>(p.out.data);
  for (std::int64_t t = t0; t < t1; ++t) {
    for (std::int64_t g = 0; g < group; ++g) {
      const std::int64_t h = kv_head * group + g;
      const std::int64_t row = g * rows.len_q + t;
      const char* dout_row = dout + static_cast<std::size_t>(p.offset_q(p.dout, b, t, h)) * elem;
      const char* out_row = out + static_cast<std::size_t>(p.offset_q(p.out, b, t, h)) * elem;
      simd::load_row<V>(q + static_cast<std::size_t>(p.offset_q(p.q, b, t, h)) * elem, p.dtype, d,
                        1.0f, rows.q + row * d);
      simd::load_row<V>(dout_row, p.dtype, d, 1.0f, rows.dout + row * d);
      rows.delta[row] = row_dot<V>(dout_row, out_row, p.dtype, d);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t g = 0; g < group; ++g) {
    const float* lse = p.lse_row(b, kv_head * group + g);
    for (std::int64_t t = t0; t < t1; ++t) {
      const float l = lse[t * p.lse_token_stride];
      rows.lse[g * rows.len_q + t] = l == -inf ? inf : l * kLog2e;
    }
  }
}

// Rows [k0, k0 + rows) of KV head kv_head of op (k or v) -> dst (rows, head_dim) f32.
template <class V>
void load_key_rows(const AttentionProblem& p, const Operand& op, std::int64_t b,
                   std::int64_t kv_head, std::int64_t k0, std::int64_t rows, float* dst) {
  const std::int64_t d = p.head_dim;
  const std::size_t elem = dtype_size(p.dtype);
  const char* base = static_cast<const char*>(op.data);
  for (std::int64_t j = 0; j < rows; ++j) {
    const char* row = base + static_cast<std::size_t>(p.offset_k(op, b, k0 + j, kv_head)) * elem;
    simd::load_row<V>(row, p.dtype, d, 1.0f, dst + j * d);
  }
}

// src (rows, head_dim) f32 -> rows [k0, k0 + rows) of KV head kv_head of op (dk or dv).
template <class V>
void store_key_rows(const AttentionProblem& p, const Operand& op, std::int64_t b,
                    std::int64_t kv_head, std::int64_t k0, std::int64_t rows, const float* src) {
  const std::int64_t d = p.head_dim;
  const std::size_t elem = dtype_size(p.dtype);
  char* base = static_cast<char*>(op.data);
  for (std::int64_t j = 0; j < rows; ++j) {
    char* row = base + static_cast<std::size_t>(p.offset_k(op, b, k0 + j, kv_head)) * elem;
    simd::store_row<V>(src + j * d, 1.0f, p.dtype, d, row);
  }
}

// P = exp2(S * scale * log2e - lse * log2e) in place over rows x ncols (ncols a multiple of
// kWidth). With soft-cap c: P = exp2(c * log2e * tanh(S * scale / c) - lse * log2e) and
// capgrad = 1 - tanh^2, the derivative of the cap for dS.
template <class V>
void probabilities(float* s, float* capgrad, std::int64_t ld, std::int64_t rows,
                   std::int64_t ncols, const float* row_lse, float scale, float softcap) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  if (softcap > 0.0f) {
    const vec to_tanh = V::set1(scale / softcap), cap = V::set1(softcap * kLog2e);
    const vec one = V::set1(1.0f);
    for (std::int64_t i = 0; i < rows; ++i) {
      const vec neg_lse = V::set1(-row_lse[i]);
      float* row = s + i * ld;
      float* grad = capgrad + i * ld;
      for (std::int64_t j = 0; j < ncols; j += W) {
        const vec t = simd::tanh<V>(V::mul(V::load(row + j), to_tanh));
        V::store(row + j, simd::exp2<V>(V::fmadd(t, cap, neg_lse)));
        V::store(grad + j, V::sub(one, V::mul(t, t)));
      }
    }
    return;
  }
  const vec to_log2 = V::set1(scale * kLog2e);
  for (std::int64_t i = 0; i < rows; ++i) {
    const vec neg_lse = V::set1(-row_lse[i]);
    float* row = s + i * ld;
    for (std::int64_t j = 0; j < ncols; j += W) {
      V::store(row + j, simd::exp2<V>(V::fmadd(V::load(row + j), to_log2, neg_lse)));
    }
  }
}

// Zeroes P outside each query row's visible keys, on a partial tile of queries [q0, q0 + rows)
// x keys [k0, k0 + kn). Query qi sees the keys [qi + offset - left, qi + offset + right] (each
// bound only when >= 0), so every row is two fills. (A template so each ISA gets its own copy.)
template <class V>
void zero_invisible(float* p, std::int64_t ld, std::int64_t rows, std::int64_t kn,
                    const SequenceMask& mask, std::int64_t q0, std::int64_t k0) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t diagonal = q0 + i + mask.offset - k0;  // column of key qi + offset
    std::int64_t lo = 0, hi = kn;                              // visible columns: [lo, hi)
    if (mask.left >= 0 && diagonal - mask.left > lo) lo = diagonal - mask.left;
    if (mask.right >= 0 && diagonal + mask.right + 1 < hi) hi = diagonal + mask.right + 1;
    float* row = p + i * ld;
    if (lo >= hi) lo = hi = kn;
    for (std::int64_t j = 0; j < lo; ++j) row[j] = 0.0f;
    for (std::int64_t j = hi; j < kn; ++j) row[j] = 0.0f;
  }
}

// dS = scale * P * (dP - D) (times capgrad with soft-cap), written over dP.
template <class V>
void score_gradient(const float* p, float* dp, const float* capgrad, std::int64_t ld,
                    std::int64_t rows, std::int64_t ncols, const float* row_delta, float scale,
                    bool softcap) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  const vec sc = V::set1(scale);
  for (std::int64_t i = 0; i < rows; ++i) {
    const vec delta = V::set1(row_delta[i]);
    const float* prow = p + i * ld;
    float* drow = dp + i * ld;
    const float* grow = capgrad + i * ld;
    for (std::int64_t j = 0; j < ncols; j += W) {
      vec ds = V::mul(V::mul(V::load(prow + j), sc), V::sub(V::load(drow + j), delta));
      if (softcap) ds = V::mul(ds, V::load(grow + j));
      V::store(drow + j, ds);
    }
  }
}

// Queries [lo, hi) of a sequence that see at least one key of [k0, k1) (see SequenceMask).
// (A template only so that each ISA's translation unit gets its own copy; see simd.hpp.)
template <class V>
void visible_queries(const SequenceMask& mask, std::int64_t len_q, std::int64_t k0,
                            std::int64_t k1, std::int64_t* lo, std::int64_t* hi) {
  std::int64_t first = 0, last = len_q;
  if (mask.right >= 0 && k0 - mask.offset - mask.right > first) {
    first = k0 - mask.offset - mask.right;
  }
  if (mask.left >= 0 && k1 - mask.offset + mask.left < last) last = k1 - mask.offset + mask.left;
  *lo = first;
  *hi = last > first ? last : first;
}

// One (query block, key block) step of kv_block: queries [q0, q0 + qn) of head h (index g in
// the group), keys of the unit already packed in s.k / s.kt / s.vt.
template <class V>
void query_step(const AttentionProblem& p, const KvBlockUnit& u, const BackwardTiles<V>& t,
                const BackwardScratch& s, std::int64_t g, std::int64_t q0, std::int64_t qn,
                std::int64_t kn, TileClass tile, const SequenceMask& mask) {
  const std::int64_t d = p.head_dim;
  const std::int64_t ncols = round_up(kn, t.kPanel);  // score columns computed
  const bool softcap = p.softcap > 0.0f;
  const std::int64_t row0 = g * u.rows.len_q + q0;  // first staged row of the step
  const float* q = u.rows.q + row0 * d;             // (qn, d)
  const float* dout = u.rows.dout + row0 * d;       // (qn, d)
  const float* lse = u.rows.lse + row0;
  const float* delta = u.rows.delta + row0;

  const gemm::MatrixA q_rows{q, d, gemm::Layout::row_major};
  const gemm::MatrixA dout_rows{dout, d, gemm::Layout::row_major};
  // S (qn, ncols) = Q (qn, d) K^T (d, ncols); then P in place.
  gemm::tile_gemm<V>(qn, ncols, d, q_rows, gemm::packed_b<V>(s.kt, d), s.s, t.ld_s, false);
  probabilities<V>(s.s, s.capgrad, t.ld_s, qn, ncols, lse, p.softmax_scale, p.softcap);
  if (tile == TileClass::partial) zero_invisible<V>(s.s, t.ld_s, qn, kn, mask, q0, u.k0);
  // dP (qn, ncols) = dO (qn, d) V^T (d, ncols); then dS in place.
  gemm::tile_gemm<V>(qn, ncols, d, dout_rows, gemm::packed_b<V>(s.vt, d), s.ds, t.ld_s, false);
  score_gradient<V>(s.s, s.ds, s.capgrad, t.ld_s, qn, ncols, delta, p.softmax_scale, softcap);

  // dV (kn, d) += P^T (kn, qn) dO (qn, d);  dK (kn, d) += dS^T (kn, qn) Q (qn, d)
  const gemm::MatrixA p_t{s.s, t.ld_s, gemm::Layout::col_major};
  const gemm::MatrixA ds_t{s.ds, t.ld_s, gemm::Layout::col_major};
  gemm::tile_gemm<V>(kn, d, qn, p_t, gemm::row_major_b<V>(dout, d), s.dv, d, true);
  gemm::tile_gemm<V>(kn, d, qn, ds_t, gemm::row_major_b<V>(q, d), s.dk, d, true);
  // dQ rows (qn, d) += dS (qn, kn) K (kn, d)
  float* dq = u.dq + row0 * d;
  const gemm::MatrixA ds_rows{s.ds, t.ld_s, gemm::Layout::row_major};
  gemm::tile_gemm<V>(qn, d, kn, ds_rows, gemm::packed_b<V>(s.k, kn), dq, d, true);
}

// Role 2: the whole work unit (see the file comment).
template <class V>
void kv_block(const AttentionProblem& p, const KvBlockUnit& u) {
  const BackwardTiles<V> t(p.head_dim, u.block_q, u.block_k);
  const BackwardScratch s = carve_scratch(t, u.scratch);
  const std::int64_t d = p.head_dim;
  const std::int64_t len_q = p.q_len(u.b), len_k = p.k_len(u.b);
  const std::int64_t kn = len_k - u.k0 < u.block_k ? len_k - u.k0 : u.block_k;
  const std::int64_t k1 = u.k0 + kn;
  const std::int64_t ncols = round_up(kn, t.kPanel);

  load_key_rows<V>(p, p.k, u.b, u.kv_head, u.k0, kn, s.rows);
  gemm::pack_transposed<V>(s.rows, d, kn, d, ncols, s.kt);
  gemm::pack_panels<V>(s.rows, d, kn, d, t.ld_d, s.k);
  load_key_rows<V>(p, p.v, u.b, u.kv_head, u.k0, kn, s.rows);
  gemm::pack_transposed<V>(s.rows, d, kn, d, ncols, s.vt);
  simd::zero_row<V>(s.dk, kn * d);
  simd::zero_row<V>(s.dv, kn * d);

  const SequenceMask mask = p.mask_for(len_q, len_k);
  std::int64_t q_lo = 0, q_hi = 0;
  visible_queries<V>(mask, len_q, u.k0, k1, &q_lo, &q_hi);
  for (std::int64_t g = 0; g < p.group_size(); ++g) {
    for (std::int64_t q0 = q_lo; q0 < q_hi; q0 += u.block_q) {
      const std::int64_t qn = q_hi - q0 < u.block_q ? q_hi - q0 : u.block_q;
      const TileClass tile = mask.classify(q0, q0 + qn, u.k0, k1);
      if (tile == TileClass::empty) continue;
      query_step<V>(p, u, t, s, g, q0, qn, kn, tile, mask);
    }
  }
  store_key_rows<V>(p, p.dk, u.b, u.kv_head, u.k0, kn, s.dk);
  store_key_rows<V>(p, p.dv, u.b, u.kv_head, u.k0, kn, s.dv);
}

// Role 3, the epilogue: dq rows = the sum of their partials, in order of the split index, so
// the result does not depend on thread timing.
template <class V>
void store_dq(const AttentionProblem& p, std::int64_t b, std::int64_t h, std::int64_t t0,
              std::int64_t t1, float* acc, std::int64_t nparts, std::int64_t part_stride) {
  using vec = typename V::vec;
  constexpr int W = V::kWidth;
  const std::int64_t d = p.head_dim;  // a multiple of 8: whole vectors, or a masked tail
  const std::size_t elem = dtype_size(p.dtype);
  char* out = static_cast<char*>(p.dq.data);
  for (std::int64_t t = t0; t < t1; ++t) {
    float* row = acc + (t - t0) * d;
    for (std::int64_t part = 1; part < nparts; ++part) {
      const float* other = row + part * part_stride;
      std::int64_t i = 0;
      for (; i + W <= d; i += W) V::store(row + i, V::add(V::load(row + i), V::load(other + i)));
      if (i < d) {
        const int n = static_cast<int>(d - i);
        const vec sum = V::add(V::load_partial(row + i, n), V::load_partial(other + i, n));
        V::store_partial(row + i, sum, n);
      }
    }
    char* dst = out + static_cast<std::size_t>(p.offset_q(p.dq, b, t, h)) * elem;
    simd::store_row<V>(row, 1.0f, p.dtype, d, dst);
  }
}

// GroupRows.q / .dout of the FMA kernels: (group, len_q, head_dim) f32.
template <class V>
std::int64_t staged_row_floats(std::int64_t group, std::int64_t len_q, std::int64_t head_dim) {
  return BackwardTiles<V>::lines(group * len_q * head_dim);
}

template <class V>
BackwardKernels make_kernels() {
  BackwardKernels k{};
  k.stage_rows = &stage_rows<V>;
  k.staged_row_floats = &staged_row_floats<V>;
  k.scratch_bytes = &scratch_bytes<V>;
  k.kv_block = &kv_block<V>;
  k.store_dq = &store_dq<V>;
  return k;
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::backward_detail
