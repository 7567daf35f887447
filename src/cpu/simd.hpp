// simd.hpp — per-ISA vector traits and vector math for the CPU kernels.
//
// Usage, in a translation unit compiled for the ISA (*_avx2.cpp, *_avx512.cpp) or a header
// such a file includes:
//
//   using V = simd::Avx2;                         // or simd::Avx512
//   V::vec x = V::load(p);                        // V::kWidth floats, unaligned
//   x = V::fmadd(a, b, x);                        // a * b + x
//   V::store(q, simd::exp2<V>(x));
//   simd::load_row<V>(src, DType::bf16, n, scale, dst);   // bf16/f16/f32 row -> f32 * scale
//   simd::store_row<V>(src, scale, DType::bf16, n, dst);  // f32 * scale -> row, RNE rounding
//
// Each traits struct is defined only in translation units compiled for its instruction set
// (see the #if guards), so no inline function here is ever compiled twice with different
// -m flags; otherwise the linker could keep an AVX-512 copy and run it on an AVX2 machine.
// For the same reason, kernel headers put their non-template helpers inside
//   inline namespace FASTATTN_SIMD_NAMESPACE { ... }     // avx2 or avx512, per TU
// which gives each ISA's copy its own mangled name.
// The traits are stateless; everything is a static function on a `vec` of kWidth floats.
#pragma once

// GCC 12's AVX-512 intrinsics start from `__m512 __Y = __Y;` (_mm512_undefined_ps / _epi32),
// which -Wmaybe-uninitialized, and in some inlining contexts (the integer unpacks under ASan at
// -O2) -Wuninitialized, report at every inlined use (GCC bug 105593). The warning is located in
// the intrinsics header, so silencing it around this (first) include is enough; keep simd.hpp
// the first include of <immintrin.h> in kernel files.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstdint>
#include <cstring>

#include "fastattn/tensor.hpp"

#if defined(__AVX512F__)
#define FASTATTN_SIMD_NAMESPACE isa_avx512
#elif defined(__AVX2__)
#define FASTATTN_SIMD_NAMESPACE isa_avx2
#else
#define FASTATTN_SIMD_NAMESPACE isa_generic
#endif

namespace fastattn::cpu::simd {

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(__AVX512F__)
#define FASTATTN_SIMD_AVX2 1

// AVX2 + FMA + F16C: 8 floats per vector, 16 vector registers.
struct Avx2 {
  using vec = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kRegisters = 16;
  // Register tile of the GEMM micro-kernel (tile_gemm.hpp): kGemmRows x (kGemmVectors * kWidth)
  // accumulators = 12 registers, plus 2 for the B row and 1 for the A broadcast.
  static constexpr int kGemmRows = 6;
  static constexpr int kGemmVectors = 2;
  static constexpr const char* kName = "avx2";

  static vec zero() { return _mm256_setzero_ps(); }
  static vec set1(float x) { return _mm256_set1_ps(x); }
  static vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vec x) { _mm256_storeu_ps(p, x); }
  // The first n lanes (0 <= n <= kWidth); the others read as 0 and are not written.
  static vec load_partial(const float* p, int n) { return _mm256_maskload_ps(p, lane_mask(n)); }
  static void store_partial(float* p, vec x, int n) { _mm256_maskstore_ps(p, lane_mask(n), x); }

  static vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
  static vec sub(vec a, vec b) { return _mm256_sub_ps(a, b); }
  static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
  static vec div(vec a, vec b) { return _mm256_div_ps(a, b); }
  static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }  // a * b + c
  static vec max(vec a, vec b) { return _mm256_max_ps(a, b); }  // b when a is NaN
  static vec min(vec a, vec b) { return _mm256_min_ps(a, b); }
  // where(a == b) ? x : y, per lane
  static vec select_eq(vec a, vec b, vec x, vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
  }

  static float reduce_add(vec x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float reduce_max(vec x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // 2^n for the float-encoded integer in the low mantissa bits of t = n + 1.5 * 2^23
  // (see exp2 below): shifts those bits into the exponent field and adds the bias.
  static vec pow2_from_magic(vec t) {
    const __m256i bits = _mm256_slli_epi32(_mm256_castps_si256(t), 23);
    return _mm256_castsi256_ps(_mm256_add_epi32(bits, _mm256_set1_epi32(0x3f800000)));
  }

  // 16-bit storage formats, kWidth elements.
  static vec load_bf16(const std::uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static vec load_f16(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_bf16(std::uint16_t* p, vec x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), to_bf16(x));
  }
  static void store_f16(std::uint16_t* p, vec x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  static vec load_bf16_partial(const std::uint16_t* p, int n) {
    std::uint16_t tmp[kWidth] = {};
    std::memcpy(tmp, p, sizeof(std::uint16_t) * static_cast<unsigned>(n));
    return load_bf16(tmp);
  }
  static vec load_f16_partial(const std::uint16_t* p, int n) {
    std::uint16_t tmp[kWidth] = {};
    std::memcpy(tmp, p, sizeof(std::uint16_t) * static_cast<unsigned>(n));
    return load_f16(tmp);
  }
  static void store_bf16_partial(std::uint16_t* p, vec x, int n) {
    std::uint16_t tmp[kWidth];
    store_bf16(tmp, x);
    std::memcpy(p, tmp, sizeof(std::uint16_t) * static_cast<unsigned>(n));
  }
  static void store_f16_partial(std::uint16_t* p, vec x, int n) {
    std::uint16_t tmp[kWidth];
    store_f16(tmp, x);
    std::memcpy(p, tmp, sizeof(std::uint16_t) * static_cast<unsigned>(n));
  }

  // bf16 pairs, the operand format of AVX-512 BF16's vdpbf16ps: each 32-bit lane holds two
  // bf16, the lower-indexed one in the low half. Pair vectors travel as `vec` bit patterns.
  static vec pair_lo(vec x) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(x), 16));
  }
  static vec pair_hi(vec x) {
    return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  // lo and hi rounded to bf16 (nearest even) and packed as pairs (lo in the low halves).
  static vec pack_pairs(vec lo, vec hi) {
    return _mm256_castsi256_ps(_mm256_or_si256(bf16_bits(lo), _mm256_slli_epi32(bf16_bits(hi), 16)));
  }

  // Lane i of the result = the sum of the lanes of x[i], i < kWidth: kWidth horizontal sums
  // at once (the decode kernel's dot products, decode_kernel.hpp), 7 instructions.
  static vec transpose_sum(const vec* x) { return sum8(x); }
  static __m256 sum8(const __m256* x) {
    const __m256 t0 = _mm256_hadd_ps(x[0], x[1]), t1 = _mm256_hadd_ps(x[2], x[3]);
    const __m256 t2 = _mm256_hadd_ps(x[4], x[5]), t3 = _mm256_hadd_ps(x[6], x[7]);
    // u0 lane i < 4: x[i]'s lanes 0-3 summed; lane 4 + i: its lanes 4-7. u1 likewise for x[4..8).
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }

 private:
  static __m256i lane_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  // f32 -> bf16 bits in the low half of each u32 lane, round to nearest even; NaN stays a
  // (quiet) NaN.
  static __m256i bf16_bits(vec x) {
    const __m256i b = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff));
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(0x40));
    const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, quiet_nan, _mm256_castps_si256(is_nan));
  }
  // f32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
  static __m128i to_bf16(vec x) {
    const __m256i r = bf16_bits(x);
    // Pack 8 x u32 (each < 2^16) to 8 x u16: packus works per 128-bit lane, then gather lanes.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
  }
};
#endif  // AVX2

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define FASTATTN_SIMD_AVX512 1

// AVX-512 F/BW/VL/DQ: 16 floats per vector, 32 vector registers. Uses no AVX-512 BF16
// instruction, so it runs on every AVX-512 CPU (Skylake-X and later).
struct Avx512 {
  using vec = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kRegisters = 32;
  // 12 x 32 register tile: 24 accumulators + 2 B vectors + 1 broadcast.
  static constexpr int kGemmRows = 12;
  static constexpr int kGemmVectors = 2;
  static constexpr const char* kName = "avx512";

  static vec zero() { return _mm512_setzero_ps(); }
  static vec set1(float x) { return _mm512_set1_ps(x); }
  static vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vec x) { _mm512_storeu_ps(p, x); }
  static vec load_partial(const float* p, int n) { return _mm512_maskz_loadu_ps(lane_mask(n), p); }
  static void store_partial(float* p, vec x, int n) { _mm512_mask_storeu_ps(p, lane_mask(n), x); }

  static vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
  static vec sub(vec a, vec b) { return _mm512_sub_ps(a, b); }
  static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
  static vec div(vec a, vec b) { return _mm512_div_ps(a, b); }
  static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static vec max(vec a, vec b) { return _mm512_max_ps(a, b); }
  static vec min(vec a, vec b) { return _mm512_min_ps(a, b); }
  static vec select_eq(vec a, vec b, vec x, vec y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), y, x);
  }

  static float reduce_add(vec x) { return _mm512_reduce_add_ps(x); }
  static float reduce_max(vec x) { return _mm512_reduce_max_ps(x); }

  static vec pow2_from_magic(vec t) {
    const __m512i bits = _mm512_slli_epi32(_mm512_castps_si512(t), 23);
    return _mm512_castsi512_ps(_mm512_add_epi32(bits, _mm512_set1_epi32(0x3f800000)));
  }

  static vec load_bf16(const std::uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m512i w = _mm512_cvtepu16_epi32(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static vec load_f16(const std::uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_bf16(std::uint16_t* p, vec x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(to_bf16_bits(x)));
  }
  static void store_f16(std::uint16_t* p, vec x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static vec load_bf16_partial(const std::uint16_t* p, int n) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lane_mask(n), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static vec load_f16_partial(const std::uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lane_mask(n), p));
  }
  static void store_bf16_partial(std::uint16_t* p, vec x, int n) {
    _mm512_mask_cvtepi32_storeu_epi16(p, lane_mask(n), to_bf16_bits(x));
  }
  static void store_f16_partial(std::uint16_t* p, vec x, int n) {
    _mm256_mask_storeu_epi16(p, lane_mask(n),
                             _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // bf16 pairs (see Avx2::pair_lo).
  static vec pair_lo(vec x) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(x), 16));
  }
  static vec pair_hi(vec x) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static vec pack_pairs(vec lo, vec hi) {
    return _mm512_castsi512_ps(_mm512_or_si512(to_bf16_bits(lo), _mm512_slli_epi32(to_bf16_bits(hi), 16)));
  }
  // Lane i of the result = the sum of the lanes of x[i], i < 16 (see Avx2::transpose_sum):
  // halves added, then two 8-way hadd trees.
  static vec transpose_sum(const vec* x) {
    __m256 h[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) h[i] = _mm256_add_ps(_mm512_castps512_ps256(x[i]), _mm512_extractf32x8_ps(x[i], 1));
    return _mm512_insertf32x8(_mm512_zextps256_ps512(sum8(h)), sum8(h + 8), 1);
  }
  static __m256 sum8(const __m256* x) {
    const __m256 t0 = _mm256_hadd_ps(x[0], x[1]), t1 = _mm256_hadd_ps(x[2], x[3]);
    const __m256 t2 = _mm256_hadd_ps(x[4], x[5]), t3 = _mm256_hadd_ps(x[6], x[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }
#if defined(__AVX512BF16__)
  // acc + lo(a) lo(b) + hi(a) hi(b) per lane: vdpbf16ps. Only for CPUs with AVX-512 BF16; the
  // caller checks (Isa::avx512bf16).
  static constexpr bool kHasDotBf16 = true;
  static vec dot_bf16(vec acc, vec a, vec b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);  // vector casts: same bits
  }
#endif

 private:
  static __mmask16 lane_mask(int n) {
    return static_cast<__mmask16>((1u << static_cast<unsigned>(n)) - 1u);
  }
  // f32 -> bf16 bits in the low half of each u32 lane, round to nearest even, NaN kept quiet.
  static __m512i to_bf16_bits(vec x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, quiet_nan);
  }
};
#endif  // AVX-512

// acc + lo(a) lo(b) + hi(a) hi(b) per lane, a and b bf16 pairs. kNative: vdpbf16ps
// (V::dot_bf16); else two FMAs on the widened halves, which compute the same exact bf16 x bf16
// products and may round the sums differently (for testing the bf16-pair kernels on CPUs
// without AVX-512 BF16).
template <class V, bool kNative>
inline typename V::vec dot_pairs(typename V::vec acc, typename V::vec a, typename V::vec b) {
  if constexpr (kNative) {
    return V::dot_bf16(acc, a, b);
  } else {
    acc = V::fmadd(V::pair_lo(a), V::pair_lo(b), acc);
    return V::fmadd(V::pair_hi(a), V::pair_hi(b), acc);
  }
}

// ---- vector math, shared by all traits -------------------------------------------------------

// 2^x, lane-wise. Accuracy: relative error <= 1.5e-7 (about 1.3 ulp) for x in [-126, 127].
// Results below 2^-126 flush to exactly 0 (x <= -126.5, -inf and NaN give 0), so
// exp2(-inf - m) is a clean 0 for masked scores; x > 127 saturates near 2^127.5.
// Method: n = round(x) with the 1.5 * 2^23 trick, f = x - n in [-0.5, 0.5],
// 2^f = 1 + f * q(f) with a degree-5 minimax polynomial (fitted for relative error 9e-8),
// 2^n built in the exponent field. The clamp at -127 makes n = -127 produce an all-zero word.
template <class V>
inline typename V::vec exp2(typename V::vec x) {
  using vec = typename V::vec;
  const vec magic = V::set1(12582912.0f);  // 1.5 * 2^23
  x = V::max(x, V::set1(-127.0f));         // also maps NaN to -127
  x = V::min(x, V::set1(127.0f));
  const vec t = V::add(x, magic);
  const vec n = V::sub(t, magic);
  const vec f = V::sub(x, n);
  vec q = V::set1(1.326471882e-03f);
  q = V::fmadd(q, f, V::set1(9.671513746e-03f));
  q = V::fmadd(q, f, V::set1(5.550733776e-02f));
  q = V::fmadd(q, f, V::set1(2.402224206e-01f));
  q = V::fmadd(q, f, V::set1(6.931469776e-01f));
  const vec p = V::fmadd(q, f, V::set1(1.0f));
  return V::mul(p, V::pow2_from_magic(t));
}

// e^x = 2^(x log2 e), same accuracy plus the rounding of the product (|x| < 88).
template <class V>
inline typename V::vec exp(typename V::vec x) {
  return exp2<V>(V::mul(x, V::set1(1.44269504088896341f)));
}

// tanh(x), lane-wise: a [13/6] rational minimax approximation on [-7.9053, 7.9053] (outside it
// tanh rounds to +-1 in float). Maximum error a few ulp; odd, so tanh(-x) = -tanh(x) exactly.
template <class V>
inline typename V::vec tanh(typename V::vec x) {
  using vec = typename V::vec;
  const float clamp = 7.90531110763549805f;
  x = V::min(V::max(x, V::set1(-clamp)), V::set1(clamp));
  const vec x2 = V::mul(x, x);
  vec p = V::set1(-2.76076847742355e-16f);
  p = V::fmadd(p, x2, V::set1(2.00018790482477e-13f));
  p = V::fmadd(p, x2, V::set1(-8.60467152213735e-11f));
  p = V::fmadd(p, x2, V::set1(5.12229709037114e-08f));
  p = V::fmadd(p, x2, V::set1(1.48572235717979e-05f));
  p = V::fmadd(p, x2, V::set1(6.37261928875436e-04f));
  p = V::fmadd(p, x2, V::set1(4.89352455891786e-03f));
  p = V::mul(p, x);
  vec q = V::set1(1.19825839466702e-06f);
  q = V::fmadd(q, x2, V::set1(1.18534705686654e-04f));
  q = V::fmadd(q, x2, V::set1(2.26843463243900e-03f));
  q = V::fmadd(q, x2, V::set1(4.89352518554385e-03f));
  return V::div(p, q);
}

// ---- rows of any storage dtype <-> f32 --------------------------------------------------------

// dst[0, n) = scale * src[0, n), src in f32 / f16 / bf16 (widened exactly before scaling).
template <class V>
inline void load_row(const void* src, DType dtype, std::int64_t n, float scale, float* dst) {
  constexpr int W = V::kWidth;
  const typename V::vec s = V::set1(scale);
  std::int64_t i = 0;
  if (dtype == DType::f32) {
    const float* x = static_cast<const float*>(src);
    for (; i + W <= n; i += W) V::store(dst + i, V::mul(V::load(x + i), s));
    if (i < n) V::store_partial(dst + i, V::mul(V::load_partial(x + i, int(n - i)), s), int(n - i));
  } else if (dtype == DType::bf16) {
    const std::uint16_t* x = static_cast<const std::uint16_t*>(src);
    for (; i + W <= n; i += W) V::store(dst + i, V::mul(V::load_bf16(x + i), s));
    if (i < n) {
      V::store_partial(dst + i, V::mul(V::load_bf16_partial(x + i, int(n - i)), s), int(n - i));
    }
  } else {  // f16
    const std::uint16_t* x = static_cast<const std::uint16_t*>(src);
    for (; i + W <= n; i += W) V::store(dst + i, V::mul(V::load_f16(x + i), s));
    if (i < n) {
      V::store_partial(dst + i, V::mul(V::load_f16_partial(x + i, int(n - i)), s), int(n - i));
    }
  }
}

// dst[0, n) = scale * src[0, n) rounded (to nearest even) to dtype f32 / f16 / bf16.
template <class V>
inline void store_row(const float* src, float scale, DType dtype, std::int64_t n, void* dst) {
  constexpr int W = V::kWidth;
  const typename V::vec s = V::set1(scale);
  std::int64_t i = 0;
  if (dtype == DType::f32) {
    float* y = static_cast<float*>(dst);
    for (; i + W <= n; i += W) V::store(y + i, V::mul(V::load(src + i), s));
    if (i < n) V::store_partial(y + i, V::mul(V::load_partial(src + i, int(n - i)), s), int(n - i));
  } else if (dtype == DType::bf16) {
    std::uint16_t* y = static_cast<std::uint16_t*>(dst);
    for (; i + W <= n; i += W) V::store_bf16(y + i, V::mul(V::load(src + i), s));
    if (i < n) {
      V::store_bf16_partial(y + i, V::mul(V::load_partial(src + i, int(n - i)), s), int(n - i));
    }
  } else {  // f16
    std::uint16_t* y = static_cast<std::uint16_t*>(dst);
    for (; i + W <= n; i += W) V::store_f16(y + i, V::mul(V::load(src + i), s));
    if (i < n) {
      V::store_f16_partial(y + i, V::mul(V::load_partial(src + i, int(n - i)), s), int(n - i));
    }
  }
}

// dst[0, n) = 0.
template <class V>
inline void zero_row(float* dst, std::int64_t n) {
  constexpr int W = V::kWidth;
  std::int64_t i = 0;
  for (; i + W <= n; i += W) V::store(dst + i, V::zero());
  if (i < n) V::store_partial(dst + i, V::zero(), int(n - i));
}

// dst[0, n) *= scale.
template <class V>
inline void scale_row(float* dst, std::int64_t n, float scale) {
  constexpr int W = V::kWidth;
  const typename V::vec s = V::set1(scale);
  std::int64_t i = 0;
  for (; i + W <= n; i += W) V::store(dst + i, V::mul(V::load(dst + i), s));
  if (i < n) V::store_partial(dst + i, V::mul(V::load_partial(dst + i, int(n - i)), s), int(n - i));
}

}  // namespace fastattn::cpu::simd
