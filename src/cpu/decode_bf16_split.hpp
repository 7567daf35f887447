// decode_bf16_split.hpp — the AVX-512 products of a bf16 decode tile (decode_kernel.hpp): K and V
// read in place as bf16, widened in registers to f32, multiplied with f32 FMAs; no staging copy
// of the tile. On AVX-512 BF16 CPUs both products take vdpbf16ps instead (score_split on bf16 Q,
// pv_pairs; below).
//
// Why: decode is read-bound only if each core computes faster than it reads. With one query
// token over GQA 32/8 a KV head has 4 rows, and the row-at-a-time form (score_row_pairs on
// vdpbf16ps, V staged to f32 in L1, f32 FMAs for P V) ran at ~12 GB/s of K+V per core with the
// tile already in L2 or L3 — no faster than one core reads memory here (11.4 GB/s), so compute
// and memory time added up (70% of the read bandwidth at 2 threads). vdpbf16ps retires 32
// multiply-adds at half the rate of an f32 FMA's 16 on this Sapphire Rapids VM (`fastattn info`:
// bf16 dot 113 GFLOP/s against fp32 FMA 226 on one thread), so f32 FMAs on widened bf16 won
// over that row-at-a-time form as long as the widening is shared (until the twenty-third session
// Sapphire Rapids ran this widened form; the pair form below, with its spread prefetches, then
// ran 1.48-1.58x faster there too, docs/inference-cpu-decode.md): here
//   S (rows, keys) = Q K^T: blocks of up to 4 rows x 4 keys (16 accumulators); each 32-column
//        chunk of a K row is loaded and widened once for the block's rows (vpslld gives the even
//        columns, vpandd the odd ones), Q held as f32 in the same even/odd order; one
//        transpose-sum per 4 keys gives 16 scores, a 4 x 4 shuffle of 128-bit lanes turns four
//        of them into 16 keys of each row.
//   O (rows, dp) += P V: P in f32, each V row chunk widened once for up to 4 rows, 4 rows x 64
//        columns of accumulators in registers. O's columns are then in the even/odd order of
//        each 32-column chunk (split_position, decode_tiles.hpp); write_partials restores them.
// Measured (b1 h32/8 d128 bf16, one token, one thread, tile in L2, 256 keys): 17 GB/s of K+V
// against 13 GB/s for the row-at-a-time form; at 32768 keys and 2 threads see
// docs/inference-cpu-decode.md.
// On AVX-512 BF16 CPUs (DecodeForm::bf16_dot; faster than the widened form both where vdpbf16ps
// runs at twice the FMA's rate, AMD Zen 4, and where at half, Sapphire Rapids: decode_plan.cpp)
// both products take it:
//   S on K's words as they are and Q as bf16 pairs (score_split on bf16 Q): one instruction per
//        32 products instead of two FMAs plus a share of the widening;
//   O += P V with P rounded to bf16 (round_p_to_bf16; the GPU kernels round it the same way)
//        and V's rows of two keys interleaved word by word (pv_pairs): one instruction per 32
//        products, 16 columns of two keys, instead of two FMAs and the widening.
// Measured on the AMD EPYC VM (docs/inference-cpu-decode.md), with the spread prefetch (the pf
// arguments) against the form before (P V on FMAs, one prefetch burst per head): one thread, 256
// keys in L2, 16.0 -> 21.0 GB/s of K+V; the one-token row at 32768 keys, 2 threads, 8.26 -> 5.00 ms.
#pragma once

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/decode_tiles.hpp"

namespace fastattn::cpu::decode_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

// S rows [0, rows) of one KV head x keys [0, kn) into s (row stride lds): q_r at q + r * ldq,
// key j's row at k + off[j] (d bf16). Writes round_up(kn, 16) entries per row; those past kn
// repeat the last key (masked by the softmax). Q (deduced from q) says the form: float, Q in the
// split layout and K widened for f32 FMAs (DecodeForm::bf16_widened); std::uint16_t, Q as bf16
// in its own order (d words, zero-padded to a multiple of 32) and one vdpbf16ps per 32 products
// (bf16_dot: AVX-512 BF16 CPUs only, the plan checks the ISA).
// pf (optional): the next key tile's K rows of this head (at most kn), one prefetched into L2 as
// each key's scores are formed, so that memory streams during the products instead of in one
// burst that stalls the core.
template <class V, class Q>
void score_split(std::int64_t rows, const Q* q, std::int64_t ldq, const std::uint16_t* k, const std::int64_t* off,
                 std::int64_t d, std::int64_t kn, float* s, std::int64_t lds, NextRows* pf = nullptr);
// O rows [0, rows) (row stride dp, split layout) += P (rows, kn; row stride ldp, f32) V, V row j
// at v + off[j] (d bf16).
template <class V>
void pv_split(std::int64_t rows, float* o, std::int64_t dp, const float* p, std::int64_t ldp, const std::uint16_t* v,
              const std::int64_t* off, std::int64_t d, std::int64_t kn);
// The same product with P as bf16 (rows, kn; row stride ldp words, even; entry kn zero when kn
// is odd) on vdpbf16ps over key pairs (DecodeForm::bf16_dot): O in the pair layout
// (pair_position, decode_tiles.hpp). AVX-512 BF16 CPUs only. pf: as score_split's, the next
// tile's V rows.
template <class V>
void pv_pairs(std::int64_t rows, float* o, std::int64_t dp, const std::uint16_t* p, std::int64_t ldp,
              const std::uint16_t* v, const std::int64_t* off, std::int64_t d, std::int64_t kn,
              NextRows* pf = nullptr);
// P rows [0, rows) (f32, row stride ldp, kn entries) rounded to bf16 into pb (row stride ldpb
// words), with entry kn set to 0 when kn is odd (pv_pairs reads keys in pairs).
inline void round_p_to_bf16(std::int64_t rows, const float* p, std::int64_t ldp, std::uint16_t* pb, std::int64_t ldpb,
                            std::int64_t kn);

#if defined(FASTATTN_SIMD_AVX512)

namespace split {

// 32 bf16 from p, of which n (>= 1) are real; the rest read as 0.
inline __m512i load_words(const std::uint16_t* p, std::int64_t n) {
  if (n >= 32) return _mm512_loadu_si512(p);
  return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((std::uint64_t{1} << n) - 1), p);
}
// The 32-column chunk at column c of a row of d bf16 (0 past d).
inline __m512i chunk_words(const std::uint16_t* row, std::int64_t c, std::int64_t d) {
  return c < d ? load_words(row + c, d - c) : _mm512_setzero_si512();
}
// O's register block: rows [0, NR), columns [c0, c0 + 16 NA) (row stride dp), in and out.
template <int NR, int NA>
void load_block(__m512 (&acc)[NR][NA], const float* o, std::int64_t dp, std::int64_t c0) {
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int a = 0; a < NA; ++a) acc[r][a] = _mm512_loadu_ps(o + r * dp + c0 + 16 * a);
}
template <int NR, int NA>
void store_block(const __m512 (&acc)[NR][NA], float* o, std::int64_t dp, std::int64_t c0) {
#pragma GCC unroll 4
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 4
    for (int a = 0; a < NA; ++a) _mm512_storeu_ps(o + r * dp + c0 + 16 * a, acc[r][a]);
}
// The even and odd elements of 32 bf16 as 16 f32 each (exact): the low word of each 32-bit lane
// shifted up, the high word masked.
inline __m512 even_f32(__m512i w) { return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)); }
inline __m512 odd_f32(__m512i w) {
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// Lane i of the result = the sum of the lanes of x[kSumSlot[i]]: a tree of 30 shuffles and 15
// adds (V::transpose_sum spends ~45 shuffles on port 5 and ~30 adds, a quarter of the score's
// time here). The slots are a permutation the caller folds into where it keeps its sums.
constexpr int kSumSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
inline __m512 sum_lanes16(const __m512* x) {
  __m512 t[8], u[4], v[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)  // 256-bit halves: lanes 0-7 partial sums of x[i], 8-15 of x[i + 8]
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x[i], x[i + 8], 0x44), _mm512_shuffle_f32x4(x[i], x[i + 8], 0xEE));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)  // 128-bit blocks: x[i], x[i + 8], x[i + 4], x[i + 12]
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 4], 0x88), _mm512_shuffle_f32x4(t[i], t[i + 4], 0xDD));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)  // pairs within each block
    v[i] = _mm512_add_ps(_mm512_shuffle_ps(u[i], u[i + 2], 0x44), _mm512_shuffle_ps(u[i], u[i + 2], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
}

// score_split for NR <= 4 rows. Both forms accumulate, per lane i of a 32-column chunk, the
// products of columns 2i and 2i + 1: the same sums of the same exact products, in a different
// rounding order.
template <int NR, class Q>
void score_rows(const Q* q, std::int64_t ldq, const std::uint16_t* k, const std::int64_t* off, std::int64_t d,
                std::int64_t kn, float* s, std::int64_t lds, NextRows* pf = nullptr) {
  using V = simd::Avx512;
  using vec = V::vec;
  constexpr bool kDot = std::is_same_v<Q, std::uint16_t>;
  static_assert(kDot || std::is_same_v<Q, float>, "Q: bf16 words (vdpbf16ps) or f32 (FMAs)");
#if !defined(__AVX512BF16__)
  static_assert(!kDot, "q.k on vdpbf16ps: compiled with -mavx512bf16 only");
#endif
  for (std::int64_t j0 = 0; j0 < kn; j0 += 16) {
    vec group[4];  // lane 4 r + kk: row r, key j0 + 4 g + kk
    for (int g = 0; g < 4; ++g) {
      if (j0 + 4 * g >= kn) {
        group[g] = V::zero();
        continue;
      }
      const std::uint16_t* rows[4];
      for (int kk = 0; kk < 4; ++kk) rows[kk] = k + off[std::min<std::int64_t>(j0 + 4 * g + kk, kn - 1)];
      if (pf != nullptr) {
        for (int kk = 0; kk < 4; ++kk) pf->prefetch_one();
      }
      vec acc[16];  // the sum of row r, key kk in acc[kSumSlot[4 r + kk]], so that it lands in lane 4 r + kk
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = V::zero();
      for (std::int64_t c = 0; c < d; c += 32) {
        if constexpr (kDot) {
#if defined(__AVX512BF16__)
          __m512i w[4];
#pragma GCC unroll 4
          for (int kk = 0; kk < 4; ++kk) w[kk] = load_words(rows[kk] + c, d - c);
#pragma GCC unroll 4
          for (int r = 0; r < NR; ++r) {
            const vec qw = _mm512_castsi512_ps(_mm512_loadu_si512(q + r * ldq + c));
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; ++kk) {
              vec& a = acc[kSumSlot[4 * r + kk]];
              a = V::dot_bf16(a, qw, _mm512_castsi512_ps(w[kk]));
            }
          }
#endif
        } else {
          vec even[4], odd[4];
#pragma GCC unroll 4
          for (int kk = 0; kk < 4; ++kk) {
            const __m512i w = load_words(rows[kk] + c, d - c);
            even[kk] = even_f32(w);
            odd[kk] = odd_f32(w);
          }
#pragma GCC unroll 4
          for (int r = 0; r < NR; ++r) {
            const vec qe = V::load(q + r * ldq + c), qo = V::load(q + r * ldq + c + 16);
#pragma GCC unroll 4
            for (int kk = 0; kk < 4; ++kk) {
              vec& a = acc[kSumSlot[4 * r + kk]];
              a = V::fmadd(qe, even[kk], a);
              a = V::fmadd(qo, odd[kk], a);
            }
          }
        }
      }
      group[g] = sum_lanes16(acc);
    }
    // 128-bit lane r of group[g] holds row r's keys 4g..4g+3: a 4 x 4 transpose of lanes.
    const vec t0 = _mm512_shuffle_f32x4(group[0], group[1], 0x44);  // g0.l0 g0.l1 g1.l0 g1.l1
    const vec t1 = _mm512_shuffle_f32x4(group[0], group[1], 0xEE);  // g0.l2 g0.l3 g1.l2 g1.l3
    const vec t2 = _mm512_shuffle_f32x4(group[2], group[3], 0x44);
    const vec t3 = _mm512_shuffle_f32x4(group[2], group[3], 0xEE);
    V::store(s + j0, _mm512_shuffle_f32x4(t0, t2, 0x88));
    if constexpr (NR > 1) V::store(s + lds + j0, _mm512_shuffle_f32x4(t0, t2, 0xDD));
    if constexpr (NR > 2) V::store(s + 2 * lds + j0, _mm512_shuffle_f32x4(t1, t3, 0x88));
    if constexpr (NR > 3) V::store(s + 3 * lds + j0, _mm512_shuffle_f32x4(t1, t3, 0xDD));
  }
}

// O rows [0, NR), columns [c0, c0 + 32 NC) += P V: NR x 2 NC accumulators in registers (the
// column count is a template argument so that they are not spilled).
template <int NR, int NC>
void pv_block(float* o, std::int64_t dp, std::int64_t c0, const float* p, std::int64_t ldp, const std::uint16_t* v,
              const std::int64_t* off, std::int64_t d, std::int64_t kn) {
  using V = simd::Avx512;
  using vec = V::vec;
  vec acc[NR][2 * NC];
  load_block(acc, o, dp, c0);
  for (std::int64_t j = 0; j < kn; ++j) {
    const std::uint16_t* vr = v + off[j];
    vec x[2 * NC];
#pragma GCC unroll 2
    for (int ch = 0; ch < NC; ++ch) {
      const __m512i w = chunk_words(vr, c0 + 32 * ch, d);
      x[2 * ch] = even_f32(w);
      x[2 * ch + 1] = odd_f32(w);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      const vec pr = V::broadcast(p + r * ldp + j);
#pragma GCC unroll 4
      for (int a = 0; a < 2 * NC; ++a) acc[r][a] = V::fmadd(pr, x[a], acc[r][a]);
    }
  }
  store_block(acc, o, dp, c0);
}

template <int NR>
void pv_rows(float* o, std::int64_t dp, const float* p, std::int64_t ldp, const std::uint16_t* v,
             const std::int64_t* off, std::int64_t d, std::int64_t kn) {
  std::int64_t c0 = 0;
  for (; c0 + 64 <= dp; c0 += 64) pv_block<NR, 2>(o, dp, c0, p, ldp, v, off, d, kn);
  if (c0 < dp) pv_block<NR, 1>(o, dp, c0, p, ldp, v, off, d, kn);
}

#if defined(__AVX512BF16__)
// O rows [0, NR), columns [c0, c0 + 32 NC) += P V on key pairs. Keys j and j + 1 of a 32-column
// chunk are interleaved word by word in registers (vpunpcklwd / vpunpckhwd within 128-bit
// lanes), so 32-bit lane i holds (V[j][c], V[j + 1][c]) and one vdpbf16ps with the broadcast
// pair (P[r][j], P[r][j + 1]) adds both keys' products for 16 columns: half the instructions of
// the widened form's FMAs, and no widening. Column order per chunk: pair_position.
// kFull: columns [c0, c0 + 32 NC) all lie below d, so that the loads need no mask.
template <int NR, int NC, bool kFull>
void pv_pairs_block(float* o, std::int64_t dp, std::int64_t c0, const std::uint16_t* p, std::int64_t ldp,
                    const std::uint16_t* v, const std::int64_t* off, std::int64_t d, std::int64_t kn,
                    NextRows* pf = nullptr) {
  using V = simd::Avx512;
  using vec = V::vec;
  vec acc[NR][2 * NC];
  load_block(acc, o, dp, c0);
  const auto load = [&](const std::uint16_t* row, int ch) {
    if constexpr (kFull) return _mm512_loadu_si512(row + c0 + 32 * ch);
    return chunk_words(row, c0 + 32 * ch, d);
  };
  // Keys j and j + 1 (w1 = 0 for a lone last key, whose P pair's second word is 0 too).
  const auto add_pair = [&](std::int64_t j, const __m512i* w0, const __m512i* w1) {
    __m512i x[2 * NC];
#pragma GCC unroll 2
    for (int ch = 0; ch < NC; ++ch) {
      x[2 * ch] = _mm512_unpacklo_epi16(w0[ch], w1[ch]);
      x[2 * ch + 1] = _mm512_unpackhi_epi16(w0[ch], w1[ch]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, p + r * ldp + j, 4);
      const vec pr = _mm512_castsi512_ps(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int a = 0; a < 2 * NC; ++a) acc[r][a] = V::dot_bf16(acc[r][a], pr, _mm512_castsi512_ps(x[a]));
    }
  };
  std::int64_t j = 0;
  for (; j + 1 < kn; j += 2) {
    if (pf != nullptr) {
      pf->prefetch_one();
      pf->prefetch_one();
    }
    __m512i w0[NC], w1[NC];
#pragma GCC unroll 2
    for (int ch = 0; ch < NC; ++ch) {
      w0[ch] = load(v + off[j], ch);
      w1[ch] = load(v + off[j + 1], ch);
    }
    add_pair(j, w0, w1);
  }
  if (j < kn) {
    if (pf != nullptr) pf->prefetch_one();
    __m512i w0[NC], w1[NC];
#pragma GCC unroll 2
    for (int ch = 0; ch < NC; ++ch) {
      w0[ch] = load(v + off[j], ch);
      w1[ch] = _mm512_setzero_si512();
    }
    add_pair(j, w0, w1);
  }
  store_block(acc, o, dp, c0);
}

template <int NR>
void pv_pairs_rows(float* o, std::int64_t dp, const std::uint16_t* p, std::int64_t ldp, const std::uint16_t* v,
                   const std::int64_t* off, std::int64_t d, std::int64_t kn, NextRows* pf) {
  std::int64_t c0 = 0;
  for (; c0 + 64 <= dp; c0 += 64, pf = nullptr) {  // the first column block prefetches
    if (c0 + 64 <= d) {
      pv_pairs_block<NR, 2, true>(o, dp, c0, p, ldp, v, off, d, kn, pf);
    } else {
      pv_pairs_block<NR, 2, false>(o, dp, c0, p, ldp, v, off, d, kn, pf);
    }
  }
  if (c0 < dp) pv_pairs_block<NR, 1, false>(o, dp, c0, p, ldp, v, off, d, kn, pf);
}
#endif

}  // namespace split

// Rows in blocks of up to 4 (the products' register blocks): fn(nr, r0) for each block, nr a
// std::integral_constant of the block's rows, so that each size is its own instantiation.
template <class Fn>
inline void for_row_blocks(std::int64_t rows, Fn&& fn) {
  for (std::int64_t r0 = 0; r0 < rows; r0 += 4) {
    switch (std::min<std::int64_t>(4, rows - r0)) {
      case 4: fn(std::integral_constant<int, 4>{}, r0); break;
      case 3: fn(std::integral_constant<int, 3>{}, r0); break;
      case 2: fn(std::integral_constant<int, 2>{}, r0); break;
      default: fn(std::integral_constant<int, 1>{}, r0); break;
    }
  }
}

// The first block of rows prefetches (pf), the others not.
template <class V, class Q>
void score_split(std::int64_t rows, const Q* q, std::int64_t ldq, const std::uint16_t* k, const std::int64_t* off,
                 std::int64_t d, std::int64_t kn, float* s, std::int64_t lds, NextRows* pf) {
  for_row_blocks(rows, [&](auto nr, std::int64_t r0) {
    split::score_rows<decltype(nr)::value>(q + r0 * ldq, ldq, k, off, d, kn, s + r0 * lds, lds,
                                           r0 == 0 ? pf : nullptr);
  });
}

template <class V>
void pv_split(std::int64_t rows, float* o, std::int64_t dp, const float* p, std::int64_t ldp, const std::uint16_t* v,
              const std::int64_t* off, std::int64_t d, std::int64_t kn) {
  for_row_blocks(rows, [&](auto nr, std::int64_t r0) {
    split::pv_rows<decltype(nr)::value>(o + r0 * dp, dp, p + r0 * ldp, ldp, v, off, d, kn);
  });
}

template <class V>
void pv_pairs(std::int64_t rows, float* o, std::int64_t dp, const std::uint16_t* p, std::int64_t ldp,
              const std::uint16_t* v, const std::int64_t* off, std::int64_t d, std::int64_t kn,
              NextRows* pf) {
#if defined(__AVX512BF16__)
  for_row_blocks(rows, [&](auto nr, std::int64_t r0) {
    split::pv_pairs_rows<decltype(nr)::value>(o + r0 * dp, dp, p + r0 * ldp, ldp, v, off, d, kn,
                                              r0 == 0 ? pf : nullptr);
  });
#else
  static_assert(sizeof(V) == 0, "P V on vdpbf16ps: compiled with -mavx512bf16 only");
#endif
}

inline void round_p_to_bf16(std::int64_t rows, const float* p, std::int64_t ldp, std::uint16_t* pb, std::int64_t ldpb,
                            std::int64_t kn) {
#if defined(__AVX512BF16__)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* src = p + r * ldp;
    std::uint16_t* dst = pb + r * ldpb;
    std::int64_t j = 0;
    for (; j + 16 <= kn; j += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + j)));
    }
    // Round to nearest even, as vcvtneps2bf16 (which also flushes denormal P to 0: a difference
    // below 2^-126).
    for (; j < kn; ++j) dst[j] = float_to_bf16_bits(src[j]);
    if (kn % 2 != 0) dst[kn] = 0;
  }
#else
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < kn; ++j) pb[r * ldpb + j] = float_to_bf16_bits(p[r * ldp + j]);
    if (kn % 2 != 0) pb[r * ldpb + kn] = 0;
  }
#endif
}

#endif  // FASTATTN_SIMD_AVX512

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::decode_detail
