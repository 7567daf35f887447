// backward_amx.hpp — the bf16 backward on AMX tiles: the roles of backward_kernel.hpp (stage_rows,
// kv_block; store_dq is the AVX-512 one) with the five products on bf16 tiles, f32 accumulation.
//
// Only for bf16 inputs (f32 and f16 stay on the FMA kernels). The element-wise math (P, dS, the
// masks) is backward_kernel.hpp's, in AVX-512 f32; what changes is the operands' layouts. Every
// product is C (f32, M x N) (+)= A (bf16, M x K, row-major) * B (bf16, K x N, VNNI pairs: element
// (k, n) at b[(k / 2) * ldb + 2 * n + k % 2]), the shape of amx.hpp's tile GEMM. dK and dV are
// kept transposed so that the products' B operands are P and dS themselves, whose VNNI pairs
// along the query index are one pack_pairs of two f32 rows:
//
//   S    (bq, bk)  = Q    (bq, d)  K^T  (d, bk)     A: staged Q rows      B: K^T pairs (per unit)
//   dP   (bq, bk)  = dO   (bq, d)  V^T  (d, bk)     A: staged dO rows     B: V^T pairs (per unit)
//   dV^T (d, bk)  += dO^T (d, bq)  P    (bq, bk)    A: staged dO^T        B: P pairs   (per step)
//   dK^T (d, bk)  += Q^T  (d, bq)  dS   (bq, bk)    A: staged Q^T         B: dS pairs  (per step)
//   dQ   (bq, d)   = dS   (bq, bk) K    (bk, d)     A: dS rows (per step) B: K pairs   (per unit)
//
// then dq rows += dQ (f32, the caller's accumulator: directly by the tiles when the step's rows
// and head_dim are whole tiles, else through a scratch tile) and, at the end of the unit, dk, dv
// rows = the transposes of dK^T, dV^T. P and dS are rounded to bf16 for the products (as the GPU
// kernels do); S, P, dP, dS and every accumulator are f32.
//
// Padding: products run on whole tiles (M, N multiples of 16, K of 32), so head_dim is padded to
// dp = round_up(d, 32), keys to round_up(kn, 32), queries to 16 (rows) / 32 (K). Every padded
// element an A or B operand reads is a finite value multiplied by a zero of the other operand:
// padded dims and keys of K^T, V^T, K and the staged rows are zero, P and dS pairs are zero
// past the step's qn rows and kn keys, and the staged rows run lp = round_up(len_q, 32) + 32
// tokens so that a step's tiles never leave them. Rows and columns computed in the padding of
// S, dP, dQ, dK^T and dV^T are never read.
//
// Staged rows (GroupRows.q and .dout regions, reinterpreted as bf16; staged_row_floats sizes
// them): per region, (group, lp, dp) rows then (group, dp, lp) transposes. The input is bf16,
// so staging copies bits.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

// backward_kernel.hpp (simd.hpp) first: it must be the first include of <immintrin.h>.
#include "cpu/backward_kernel.hpp"
#include "cpu/amx.hpp"
#include "cpu/transpose16.hpp"

namespace fastattn::cpu::backward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {
namespace amx_bwd {

using bf16 = std::uint16_t;
using word = std::uint32_t;  // a VNNI pair of bf16
using V = simd::Avx512;

constexpr std::int64_t kRows = 16;  // rows of a tile (M, N granularity)
constexpr std::int64_t kStep = 32;  // bf16 per tile row (K granularity)

// The staged layout of one group (see the file comment).
struct StagedLayout {
  std::int64_t d, dp, len_q, lp, group;
  StagedLayout(std::int64_t head_dim, std::int64_t lq, std::int64_t g)
      : d(head_dim), dp(round_up(head_dim, kStep)), len_q(lq), lp(round_up(lq, kStep) + kStep),
        group(g) {}
  std::int64_t rows_elems() const { return group * lp * dp; }  // one of rows / transposes
  bf16* rows(float* region, std::int64_t g) const {
    return reinterpret_cast<bf16*>(region) + g * lp * dp;
  }
  bf16* transposed(float* region, std::int64_t g) const {
    return reinterpret_cast<bf16*>(region) + rows_elems() + g * dp * lp;
  }
};

// Floats of one staged region (q or dout) for a group of `group` heads of up to len_q tokens.
inline std::int64_t staged_row_floats(std::int64_t group, std::int64_t len_q, std::int64_t d) {
  const StagedLayout l(d, len_q, group);
  return BackwardTiles<V>::lines(l.rows_elems());  // 2 x rows_elems bf16 = rows_elems floats
}

// Role 1: the bf16 rows and transposes of tokens [t0, t1) (and, from the call that stages the
// last token, the zero padding), lse * log2(e) and D as in the FMA kernels.
inline void stage_rows(const AttentionProblem& p, std::int64_t b, std::int64_t kv_head,
                       std::int64_t t0, std::int64_t t1, const GroupRows& rows) {
  const std::int64_t group = p.group_size();
  const StagedLayout l(p.head_dim, rows.len_q, group);
  const bf16* q = static_cast<const bf16*>(p.q.data);
  const bf16* dout = static_cast<const bf16*>(p.dout.data);
  const bf16* out = static_cast<const bf16*>(p.out.data);
  const std::int64_t d = l.d, dp = l.dp, lp = l.lp;
  for (std::int64_t g = 0; g < group; ++g) {
    const std::int64_t h = kv_head * group + g;
    bf16* qr = l.rows(rows.q, g);
    bf16* qt = l.transposed(rows.q, g);
    bf16* dr = l.rows(rows.dout, g);
    bf16* dt = l.transposed(rows.dout, g);
    for (std::int64_t t = t0; t < t1; ++t) {
      const bf16* qs = q + p.offset_q(p.q, b, t, h);
      const bf16* ds = dout + p.offset_q(p.dout, b, t, h);
      std::memcpy(qr + t * dp, qs, static_cast<std::size_t>(d) * sizeof(bf16));
      std::memcpy(dr + t * dp, ds, static_cast<std::size_t>(d) * sizeof(bf16));
      for (std::int64_t i = d; i < dp; ++i) qr[t * dp + i] = dr[t * dp + i] = 0;
      for (std::int64_t i = 0; i < d; ++i) {
        qt[i * lp + t] = qs[i];
        dt[i * lp + t] = ds[i];
      }
      rows.delta[g * rows.len_q + t] = row_dot<V>(ds, out + p.offset_q(p.out, b, t, h), p.dtype, d);
    }
    for (std::int64_t i = d; i < dp; ++i) {
      for (std::int64_t t = t0; t < t1; ++t) qt[i * lp + t] = dt[i * lp + t] = 0;
    }
    if (t1 == rows.len_q) {  // the padding tokens [len_q, lp)
      const std::size_t tail = static_cast<std::size_t>(lp - rows.len_q);
      std::memset(qr + rows.len_q * dp, 0, tail * static_cast<std::size_t>(dp) * sizeof(bf16));
      std::memset(dr + rows.len_q * dp, 0, tail * static_cast<std::size_t>(dp) * sizeof(bf16));
      for (std::int64_t i = 0; i < dp; ++i) {
        std::memset(qt + i * lp + rows.len_q, 0, tail * sizeof(bf16));
        std::memset(dt + i * lp + rows.len_q, 0, tail * sizeof(bf16));
      }
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (std::int64_t g = 0; g < group; ++g) {
    const float* lse = p.lse_row(b, kv_head * group + g);
    for (std::int64_t t = t0; t < t1; ++t) {
      const float lv = lse[t * p.lse_token_stride];
      rows.lse[g * rows.len_q + t] = lv == -inf ? inf : lv * kLog2e;
    }
  }
}

// Tiles of one unit and its scratch (bf16 regions counted in floats, each whole cache lines):
//   kt, vt:    K^T, V^T pairs   (dp / 2, ld_s)      words  B of S, dP
//   k:         K pairs          (ld_s / 2, dp)      words  B of dQ
//   dkt, dvt:  dK^T, dV^T       (dp, ld_s)          f32    accumulators of the unit
//   s, ds, capgrad: (mq, ld_s) f32: S then P; dP; 1 - tanh^2 (soft-cap)
//   p2, ds2:   P, dS pairs      (kq / 2, ld_s)      words  B of dV^T, dK^T
//   dsr:       dS rows          (mq, ld_s)          bf16   A of dQ
//   dq:        dQ of the step   (mq, dp)            f32
//   rows:      K or V rows as read, (ld_s, dp) bf16; then dk / dv rows to store, (ld_s, dp) f32
// ld_s = block_k rounded to 32 keys; mq, kq = block_q rounded to 16 / 32 rows.
struct AmxTiles {
  std::int64_t d, dp, block_q, block_k, ld_s, mq, kq;
  AmxTiles(std::int64_t head_dim, std::int64_t bq, std::int64_t bk)
      : d(head_dim), dp(round_up(head_dim, kStep)), block_q(bq), block_k(bk),
        ld_s(round_up(bk, kStep)), mq(round_up(bq, kRows)), kq(round_up(bq, kStep)) {}
  static std::int64_t lines(std::int64_t floats) { return round_up(floats, 16); }
  std::int64_t total_floats() const {
    return 2 * lines(dp * ld_s / 2) + lines(ld_s * dp / 2) + 2 * lines(dp * ld_s) +
           3 * lines(mq * ld_s) + 2 * lines(kq * ld_s / 2) + lines(mq * ld_s / 2) +
           lines(mq * dp) + lines(ld_s * dp);
  }
};

struct AmxScratch {
  word *kt, *vt, *k, *p2, *ds2;
  bf16* dsr;
  float *dkt, *dvt, *s, *ds, *capgrad, *dq, *rows;
};

inline AmxScratch carve(const AmxTiles& t, float* base) {
  float* next = base;
  auto take = [&next](std::int64_t floats) {
    float* region = next;
    next += AmxTiles::lines(floats);
    return region;
  };
  auto take16 = [&take](std::int64_t elems) { return reinterpret_cast<bf16*>(take(elems / 2)); };
  auto take32 = [&take](std::int64_t elems) { return reinterpret_cast<word*>(take(elems / 2)); };
  AmxScratch s{};
  s.kt = take32(t.dp * t.ld_s);
  s.vt = take32(t.dp * t.ld_s);
  s.k = take32(t.ld_s * t.dp);
  s.dkt = take(t.dp * t.ld_s);
  s.dvt = take(t.dp * t.ld_s);
  s.s = take(t.mq * t.ld_s);
  s.ds = take(t.mq * t.ld_s);
  s.capgrad = take(t.mq * t.ld_s);
  s.p2 = take32(t.kq * t.ld_s);
  s.ds2 = take32(t.kq * t.ld_s);
  s.dsr = take16(t.mq * t.ld_s);
  s.dq = take(t.mq * t.dp);
  s.rows = take(t.ld_s * t.dp);
  return s;
}

inline std::size_t scratch_bytes(std::int64_t head_dim, std::int64_t block_q, std::int64_t block_k) {
  return static_cast<std::size_t>(AmxTiles(head_dim, block_q, block_k).total_floats()) *
         sizeof(float);
}


// K or V rows as bf16 (ld_s, dp), zero past kn rows and d dims -> the transpose in pairs along
// the head dim (dp / 2, ld_s) words: word (i, j) = (row j dim 2i, row j dim 2i + 1), which is
// word i of row j, so a 32-bit transpose. With `pairs`, also K in pairs along the key
// (ld_s / 2, dp) words: word (r, c) = (row 2r dim c, row 2r + 1 dim c).
inline void pack_key_operands(const bf16* rows, const AmxTiles& t, word* transposed, word* pairs) {
  const std::int64_t dp = t.dp, ld = t.ld_s;
  const float* as_words = reinterpret_cast<const float*>(rows);  // (ld, dp / 2) words
  for (std::int64_t j = 0; j < ld; j += 16) {
    for (std::int64_t i = 0; i < dp / 2; i += 16) {
      transpose16(as_words + j * (dp / 2) + i, dp / 2, reinterpret_cast<float*>(transposed + i * ld + j), ld);
    }
  }
  if (pairs == nullptr) return;
  alignas(64) static constexpr std::int16_t kLow[32] = {
      0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
      8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr std::int16_t kHigh[32] = {
      16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
      24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  const __m512i low = _mm512_load_si512(kLow), high = _mm512_load_si512(kHigh);
  for (std::int64_t r = 0; r < ld / 2; ++r) {
    const bf16* a = rows + 2 * r * dp;
    const bf16* b = a + dp;
    word* out = pairs + r * dp;
    for (std::int64_t c = 0; c < dp; c += 32) {
      const __m512i x = _mm512_loadu_si512(a + c), y = _mm512_loadu_si512(b + c);
      _mm512_storeu_si512(out + c, _mm512_permutex2var_epi16(x, low, y));
      _mm512_storeu_si512(out + c + 16, _mm512_permutex2var_epi16(x, high, y));
    }
  }
}

// f32 -> bf16, round to nearest even. kNative (an AMX CPU, which has AVX-512 BF16): vcvtne2ps2bf16
// and one permute; else the integer rounding of simd.hpp (the emulated engine runs on any AVX-512
// CPU). The two differ only for denormal inputs, which the tiles count as 0 anyway.
template <bool kNative>
struct Bf16Pack {
  // Word n = (lo[n], hi[n]): a pair row of 16 words.
  static __m512i pairs(V::vec lo, V::vec hi) {
#if defined(__AVX512BF16__)
    if constexpr (kNative) {
      alignas(64) static constexpr std::int16_t kInterleave[32] = {
          0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
      const __m512i both = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));  // lo | hi
      return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), both);
    }
#endif
    return _mm512_castps_si512(V::pack_pairs(lo, hi));
  }
  // 32 consecutive bf16: a[0, 16) then b[0, 16).
  static void store32(bf16* dst, V::vec a, V::vec b) {
#if defined(__AVX512BF16__)
    if constexpr (kNative) {
      _mm512_storeu_si512(dst, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
      return;
    }
#endif
    V::store_bf16(dst, a);
    V::store_bf16(dst + 16, b);
  }
};

// One pass over a step's P and dP: dS = scale * P * (dP - D) (times capgrad with soft-cap), as
// score_gradient computes it, and the bf16 operands of P and dS without writing dS in f32:
//   p_pairs, ds_pairs: pairs along the row index, krows / 2 pair rows of ncols words, ld apart
//   ds_rows:           plain bf16 rows (mrows, ncols), ld apart
// all zero at rows >= n and keys >= kn (padding a product's k reads). ncols is a multiple of 32.
template <bool kNative>
void pack_step(const float* p, const float* dp, const float* capgrad, std::int64_t ld, std::int64_t n,
               std::int64_t kn, std::int64_t ncols, std::int64_t krows, std::int64_t mrows,
               const float* row_delta, float scale, bool softcap, word* p_pairs, word* ds_pairs,
               bf16* ds_rows) {
  using Pack = Bf16Pack<kNative>;
  const V::vec zero = V::zero(), sc = V::set1(scale);
  struct Pd {
    V::vec p, ds;
  };
  auto at = [&](std::int64_t r, std::int64_t c) -> Pd {
    const int live = static_cast<int>(std::clamp<std::int64_t>(kn - c, 0, 16));
    if (r >= n || live == 0) return {zero, zero};
    const std::int64_t i = r * ld + c;
    const V::vec pv = live == 16 ? V::load(p + i) : V::load_partial(p + i, live);
    const V::vec dv = live == 16 ? V::load(dp + i) : V::load_partial(dp + i, live);
    V::vec g = V::mul(V::mul(pv, sc), V::sub(dv, V::set1(row_delta[r])));
    if (softcap) g = V::mul(g, live == 16 ? V::load(capgrad + i) : V::load_partial(capgrad + i, live));
    return {pv, g};
  };
  for (std::int64_t r = 0; r < krows; r += 2) {
    word* pp = p_pairs + r / 2 * ld;
    word* dsp = ds_pairs + r / 2 * ld;
    for (std::int64_t c = 0; c < ncols; c += 32) {
      const Pd lo0 = at(r, c), lo1 = at(r, c + 16), hi0 = at(r + 1, c), hi1 = at(r + 1, c + 16);
      _mm512_storeu_si512(pp + c, Pack::pairs(lo0.p, hi0.p));
      _mm512_storeu_si512(pp + c + 16, Pack::pairs(lo1.p, hi1.p));
      _mm512_storeu_si512(dsp + c, Pack::pairs(lo0.ds, hi0.ds));
      _mm512_storeu_si512(dsp + c + 16, Pack::pairs(lo1.ds, hi1.ds));
      if (r < mrows) Pack::store32(ds_rows + r * ld + c, lo0.ds, lo1.ds);
      if (r + 1 < mrows) Pack::store32(ds_rows + (r + 1) * ld + c, hi0.ds, hi1.ds);
    }
  }
}

// Role 2 on Engine (amx.hpp's native tiles or their emulated twin).
template <class Engine>
void kv_block(const AttentionProblem& p, const KvBlockUnit& u) {
  const amx::TileScope<Engine> scope(amx::gemm_config());
  const AmxTiles t(p.head_dim, u.block_q, u.block_k);
  const AmxScratch s = carve(t, u.scratch);
  const std::int64_t d = t.d, dp = t.dp, ld = t.ld_s;
  const std::int64_t len_q = p.q_len(u.b), len_k = p.k_len(u.b);
  const std::int64_t kn = std::min(len_k - u.k0, u.block_k);
  const std::int64_t k1 = u.k0 + kn;
  const std::int64_t ncols = round_up(kn, kStep);
  const StagedLayout l(d, len_q, p.group_size());

  // K, V rows (dp wide, zero past d) -> operand layouts.
  // K, V rows as bf16 bits (ld_s, dp), zero past kn and d -> operand layouts.
  bf16* kv = reinterpret_cast<bf16*>(s.rows);
  auto load = [&](const Operand& op) {
    const bf16* base = static_cast<const bf16*>(op.data);
    for (std::int64_t j = 0; j < kn; ++j) {
      std::memcpy(kv + j * dp, base + p.offset_k(op, u.b, u.k0 + j, u.kv_head),
                  static_cast<std::size_t>(d) * sizeof(bf16));
      std::memset(kv + j * dp + d, 0, static_cast<std::size_t>(dp - d) * sizeof(bf16));
    }
    std::memset(kv + kn * dp, 0, static_cast<std::size_t>((ld - kn) * dp) * sizeof(bf16));
  };
  load(p.k);
  pack_key_operands(kv, t, s.kt, s.k);
  load(p.v);
  pack_key_operands(kv, t, s.vt, nullptr);
  simd::zero_row<V>(s.dkt, dp * ld);
  simd::zero_row<V>(s.dvt, dp * ld);

  const SequenceMask mask = p.mask_for(len_q, len_k);
  std::int64_t q_lo = 0, q_hi = 0;
  visible_queries<V>(mask, len_q, u.k0, k1, &q_lo, &q_hi);
  const bool softcap = p.softcap > 0.0f;
  for (std::int64_t g = 0; g < p.group_size(); ++g) {
    const bf16* q_rows = l.rows(u.rows.q, g);
    const bf16* q_t = l.transposed(u.rows.q, g);
    const bf16* do_rows = l.rows(u.rows.dout, g);
    const bf16* do_t = l.transposed(u.rows.dout, g);
    for (std::int64_t q0 = q_lo; q0 < q_hi; q0 += u.block_q) {
      const std::int64_t qn = std::min(q_hi - q0, u.block_q);
      const TileClass tile = mask.classify(q0, q0 + qn, u.k0, k1);
      if (tile == TileClass::empty) continue;
      const std::int64_t mrows = round_up(qn, kRows), krows = round_up(qn, kStep);
      const std::int64_t row0 = g * len_q + q0;
      const float* lse = u.rows.lse + row0;
      const float* delta = u.rows.delta + row0;
      // S = Q K^T, then P in place; dP = dO V^T, then dS in place (f32).
      amx::gemm_bf16<Engine>(mrows, ncols, dp, q_rows + q0 * dp, dp, s.kt, ld, s.s, ld, false);
      probabilities<V>(s.s, s.capgrad, ld, qn, ncols, lse, p.softmax_scale, p.softcap);
      if (tile == TileClass::partial) zero_invisible<V>(s.s, ld, qn, kn, mask, q0, u.k0);
      amx::gemm_bf16<Engine>(mrows, ncols, dp, do_rows + q0 * dp, dp, s.vt, ld, s.ds, ld, false);
      // P, dS -> bf16 operands (dS straight from P and dP); dV^T += dO^T P, dK^T += Q^T dS,
      // dQ = dS K.
      pack_step<Engine::kNative>(s.s, s.ds, s.capgrad, ld, qn, kn, ncols, krows, mrows, delta,
                                 p.softmax_scale, softcap, s.p2, s.ds2, s.dsr);
      amx::gemm_bf16<Engine>(dp, ncols, krows, do_t + q0, l.lp, s.p2, ld, s.dvt, ld, true);
      amx::gemm_bf16<Engine>(dp, ncols, krows, q_t + q0, l.lp, s.ds2, ld, s.dkt, ld, true);
      float* dq = u.dq + row0 * d;
      if (d % kRows == 0 && qn % kRows == 0) {  // whole tiles of the dq rows: accumulate there
        amx::gemm_bf16<Engine>(qn, d, ncols, s.dsr, ld, s.k, dp, dq, d, true);
        continue;
      }
      amx::gemm_bf16<Engine>(mrows, dp, ncols, s.dsr, ld, s.k, dp, s.dq, dp, false);
      for (std::int64_t i = 0; i < qn; ++i) {
        float* row = dq + i * d;
        const float* add = s.dq + i * dp;
        std::int64_t c = 0;
        for (; c + 16 <= d; c += 16) V::store(row + c, V::add(V::load(row + c), V::load(add + c)));
        if (c < d) {
          const int n = static_cast<int>(d - c);
          V::store_partial(row + c, V::add(V::load_partial(row + c, n), V::load_partial(add + c, n)), n);
        }
      }
    }
  }
  // dk, dv rows = transposes of the accumulators (ld_s, dp) f32, rounded to the dtype.
  auto store = [&](const Operand& op, const float* acc_t) {
    for (std::int64_t c = 0; c < dp; c += 16) {
      for (std::int64_t j = 0; j < ncols; j += 16) transpose16(acc_t + c * ld + j, ld, s.rows + j * dp + c, dp);
    }
    bf16* base = static_cast<bf16*>(op.data);
    for (std::int64_t j = 0; j < kn; ++j) {
      simd::store_row<V>(s.rows + j * dp, 1.0f, p.dtype, d, base + p.offset_k(op, u.b, u.k0 + j, u.kv_head));
    }
  };
  store(p.dk, s.dkt);
  store(p.dv, s.dvt);
}

template <class Engine>
BackwardKernels make_kernels() {
  BackwardKernels k{};
  k.stage_rows = &stage_rows;
  k.staged_row_floats = &staged_row_floats;
  k.scratch_bytes = &scratch_bytes;
  k.kv_block = &kv_block<Engine>;
  k.store_dq = &backward_detail::store_dq<V>;
  return k;
}

}  // namespace amx_bwd
}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::backward_detail
