// softmax.cuh — online softmax over the S fragments of one warp (FlashAttention-2).
//
// A thread holds, for each of its kMTiles MMA row tiles, two rows (sm80: g and g + 8,
// g = lane / 4); the lanes that share a row differ in the lane bits of kRowLaneMask: a quad on
// sm80/sm75 (mask 3, two shuffles per reduction), a pair on sm70 (mask 2, one shuffle). Scores are in
// the log2 domain (the scale is pre-multiplied by log2 e) so exponentials are exp2f.
// The row sum is kept per lane and reduced across the quad only once, in finalize().
#pragma once

#include <cmath>

#include "cuda/common/exp2_poly.hpp"
#include "cuda/common/fast_exp.cuh"

namespace fastattn::cuda {

template <int kRows, int kNTiles, int kRowLaneMask = 3>  // kRows = 2 * kMTiles rows per thread
struct OnlineSoftmax {
  static_assert(kRowLaneMask == 3 || kRowLaneMask == 2, "rows shared by a quad or by lanes l, l ^ 2");
  float row_max[kRows];
  float row_sum[kRows];

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.0f;
    }
  }

  __device__ __forceinline__ static float quad_max(float x) {
    if constexpr ((kRowLaneMask & 1) != 0) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  }
  __device__ __forceinline__ static float quad_sum(float x) {
    if constexpr ((kRowLaneMask & 1) != 0) x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
  }

  // The largest of this thread's 2 kNTiles scores of row `half` of row tile mt. kTree: as a
  // tree of depth log2(2 kNTiles) instead of a chain of 2 kNTiles dependent FMNMX, since every
  // exponential of the tile waits for it (in the sm90 d = 64 kernel's SASS the chain was 17
  // FMNMX deep before the first MUFU). max is exact, so both give the same value; the other
  // kernels keep the chain (the tree moved ptxas's spills of the sm80 KV-cache kernels).
  // kN: the fragments of this tile (kNTiles, or fewer where a tile's right part is known to be
  // masked for every row: update() below).
  template <bool kTree, int kMTiles, int kN>
  __device__ __forceinline__ static float thread_row_max(const float (&s)[kMTiles][kN][4], int mt, int half) {
    if constexpr (!kTree) {
      float m = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) m = fmaxf(m, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
      return m;
    } else {
      float v[kN];
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) v[nt] = fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]);
#pragma unroll
      for (int stride = 1; stride < kN; stride *= 2) {
#pragma unroll
        for (int nt = 0; nt + stride < kN; nt += 2 * stride) v[nt] = fmaxf(v[nt], v[nt + stride]);
      }
      return v[0];
    }
  }

  // 2^x for the scores of n8 fragment nt: MUFU (exp2_ftz), or, for one fragment in kPolyEvery
  // (0: none), the FMA pipe's polynomial of degree kPolyDegree (cuda/common/exp2_poly.hpp: where
  // MUFU is as busy as the tensor cores). nt is a compile-time index after unrolling.
  template <int kPolyEvery, int kPolyDegree>
  __device__ __forceinline__ static float exp2_of_fragment(int nt, float x) {
    if constexpr (kPolyEvery > 0) {
      if (nt % kPolyEvery == kPolyEvery - 1) return exp2_poly<kPolyDegree>(x);
    }
    return exp2_ftz(x);
  }

  // s[mt][nt][4]: raw scores of this tile (-inf where masked; see scale_and_mask); the log2
  // domain score is s * exp_scale (exp_scale > 0). Turns s into P = exp2(s * exp_scale - max)
  // in place, one FFMA and one MUFU per score (kPolyEvery: exp2_of_fragment), and returns per
  // row the factor the O accumulator must be rescaled by (exp2(old_max - new_max)). row_max is
  // kept in the log2 domain. kTreeMax: thread_row_max. kN (deduced from s): the tile's first kN
  // fragments, where the others are masked for every row and so would add exp2(-inf) = 0 to the
  // sums and nothing to the max (the sm90 forward's left half of a diagonal tile): the same
  // row_max and row_sum as a call on the whole tile.
  template <int kMTiles, bool kTreeMax = false, int kPolyEvery = 0, int kPolyDegree = 3, int kN = kNTiles>
  __device__ __forceinline__ void update(float (&s)[kMTiles][kN][4], float (&rescale)[kRows], float exp_scale) {
    static_assert(kN <= kNTiles, "at most the tile's fragments");
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = mt * 2 + half;
        // fmaxf drops NaN: a thread whose scores are all NaN leaves the max to the other lanes
        // and row_max, as the chain from -inf does.
        const float m = fmaxf(quad_max(thread_row_max<kTreeMax>(s, mt, half)) * exp_scale, row_max[r]);
        // A row that has seen only masked keys keeps max -inf: use 0 as the exponent base so
        // exp2(-inf - 0) = 0 instead of exp2(-inf + inf) = NaN.
        const float base = m == -INFINITY ? 0.0f : m;
        rescale[r] = exp2_ftz(row_max[r] - base);  // old max -inf -> 0
        row_max[r] = m;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kN; ++nt) {
          s[mt][nt][2 * half] = exp2_of_fragment<kPolyEvery, kPolyDegree>(nt, fmaf(s[mt][nt][2 * half], exp_scale, -base));
          s[mt][nt][2 * half + 1] =
              exp2_of_fragment<kPolyEvery, kPolyDegree>(nt, fmaf(s[mt][nt][2 * half + 1], exp_scale, -base));
          sum += s[mt][nt][2 * half] + s[mt][nt][2 * half + 1];
        }
        row_sum[r] = row_sum[r] * rescale[r] + sum;
      }
    }
  }

  // Per row: 1 / total sum (0 for rows that saw no key) and lse in natural log (-inf then).
  // kApprox: the reciprocal and log2 by the SFU's rcp.approx / lg2.approx (MUFU.RCP, MUFU.LG2:
  // about 1 ulp, and 2^-22 absolute for the log of a total >= 1, the row max's own term) instead of
  // the IEEE division and log2f, whose fix-up and polynomial sequences sit in the tile's serial
  // tail on short rows (the sm90 forward; the out is rounded to 16 bits after the multiply).
  template <bool kApprox = false>
  __device__ __forceinline__ void finalize(float (&inv_sum)[kRows], float (&lse)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float total = quad_sum(row_sum[r]);
      const bool empty = total == 0.0f || row_max[r] == -INFINITY;
      if constexpr (kApprox) {
        float inv, log2_total;
        asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(inv) : "f"(total));
        asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(log2_total) : "f"(total));
        inv_sum[r] = empty ? 0.0f : inv;
        lse[r] = empty ? -INFINITY : (row_max[r] + log2_total) * 0.69314718055994530942f;
      } else {  // as before kApprox (the sm80 kernels' SASS unchanged)
        inv_sum[r] = empty ? 0.0f : 1.0f / total;
        lse[r] = empty ? -INFINITY : (row_max[r] + log2f(total)) * 0.69314718055994530942f;
      }
    }
  }
};

}  // namespace fastattn::cuda
