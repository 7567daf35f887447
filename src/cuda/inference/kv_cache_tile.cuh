// kv_cache_tile.cuh — the KV-cache kernel's (kv_cache_kernel.cuh) work on the rows of one
// (batch, KV head, row block), by role: the keys those rows see (UnitRows), one K/V tile's
// scores, mask, online softmax and P V (attend_kv_tile), and the epilogue's pieces (the key
// warps' rows to shared memory, their lse-weighted merge, the stores of out / lse or of a split's
// f32 partial).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/inference/kv_cache_pages.cuh"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

template <class T>
using KVSoftmax = OnlineSoftmax<2 * T::kMTiles, T::kNTilesS>;

// The packed rows [r0, r1) of sequence `batch` (row = token * group + head in the group): the
// cache length, the mask aligned to it, the key tiles [n_begin, n_end) any of the rows sees, and
// the visible keys [key_lo, key_hi] of this thread's rows (two per 16-row MMA tile: lane / 4 and
// + 8; padding rows past p.rows take the last row's token).
template <class T>
struct UnitRows {
  SequenceMask mask;
  int len;
  int t_first, t_last;  // tokens of the rows
  int n_begin, n_end;   // key tiles of kBlockN keys; n_begin == n_end: no key
  int key_lo[2 * T::kMTiles], key_hi[2 * T::kMTiles];

  __device__ __forceinline__ void init(const KVCacheParams& p, int batch, int r0, int r1, int warp_row0, int lane) {
    len = kv_cache_length(p, batch);
    mask.left = p.window_left;
    mask.right = p.window_right;
    mask.offset = p.bottom_right ? static_cast<int64_t>(len) - p.seqlen_q : 0;
    mask.seqlen_k = len;
    t_first = r0 / p.group;
    t_last = (r1 - 1) / p.group;
    const int64_t key_begin = mask.key_begin(t_first), key_end = mask.key_end(t_last + 1);
    n_begin = static_cast<int>(key_begin / T::kBlockN);
    n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = min(r0 + warp_row0 + mt * 16 + lane / 4 + half * 8, p.rows - 1);
        const int64_t d = r / p.group + mask.offset;
        key_lo[2 * mt + half] = p.window_left >= 0 ? static_cast<int>(max(int64_t{0}, d - p.window_left)) : 0;
        key_hi[2 * mt + half] =
            p.window_right >= 0 ? static_cast<int>(min(static_cast<int64_t>(len) - 1, d + p.window_right)) : len - 1;
      }
  }
};

// One K/V tile (keys k0 ..) for this warp's rows and its kWarpKeys keys: S = Q K^T (soft-capped,
// or negated for a negative scale), masked where the tile is not seen whole, the online softmax
// update, O rescaled, O += P V. sQ: (kBlockM, kSmemRowElems) 16-bit, swizzled; sK: this key warp's
// rows of the stage's K tile (V at + kSmemKV).
template <class T, bool kSoftcap>
__device__ __forceinline__ void attend_kv_tile(const KVCacheParams& p, const UnitRows<T>& u, int k0, uint32_t sQ,
                                               uint32_t sK, int warp_row0, int key_warp, int lane,
                                               float (&acc_o)[T::kMTiles][T::kNTilesO][4], KVSoftmax<T>& softmax,
                                               float exp_scale) {
  float acc_s[T::kMTiles][T::kNTilesS][4];
  gemm_qk<T, typename T::FragQ, typename T::FragK>(acc_s, sQ, sK, warp_row0, lane);
  cap_or_negate_scores<T, kSoftcap>(acc_s, p.softcap, p.softcap_pre_scale, p.scale_log2);
  if (u.mask.classify(u.t_first, u.t_last + 1, k0, k0 + T::kBlockN) != TileClass::full) {
    const int j0 = k0 + key_warp * T::kWarpKeys + 2 * (lane % 4);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half)
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int j = j0 + nt * 8 + e;
            if (j < u.key_lo[2 * mt + half] || j > u.key_hi[2 * mt + half]) acc_s[mt][nt][2 * half + e] = -INFINITY;
          }
  }
  float rescale[2 * T::kMTiles];
  softmax.update(acc_s, rescale, exp_scale);
  rescale_output<T>(acc_o, rescale);
  gemm_pv<T, typename T::FragV>(acc_o, acc_s, sK + T::kSmemKV, lane);
}

// Epilogue, step 1: this warp's rows normalised by its own row sums, and their lse, to shared
// memory. sO: (kKeyWarps, kBlockM, o_stride) f32; sL: (kKeyWarps, kBlockM) f32 (natural log;
// -inf: the key warp saw no key of the row).
template <class T>
__device__ __forceinline__ void key_warp_rows_to_shared(KVSoftmax<T>& softmax,
                                                        const float (&acc_o)[T::kMTiles][T::kNTilesO][4], float* sO,
                                                        int o_stride, float* sL, int warp_row0, int key_warp,
                                                        int lane) {
  float inv_sum[2 * T::kMTiles], lse[2 * T::kMTiles];
  softmax.finalize(inv_sum, lse);
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_row0 + mt * 16 + lane / 4 + half * 8;
      const float inv = inv_sum[2 * mt + half];
      float* o_row = sO + (key_warp * T::kBlockM + r) * o_stride + 2 * (lane % 4);
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        *reinterpret_cast<float2*>(o_row + nt * 8) =
            make_float2(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
      }
      if (lane % 4 == 0) sL[key_warp * T::kBlockM + r] = lse[2 * mt + half];
    }
}

// Epilogue, step 2: columns 4c .. 4c + 3 of the CTA's row r merged over the key warps, weighted
// by their lse; row_lse: the merged lse (-inf: no key warp saw a key of the row, out 0).
template <class T>
__device__ __forceinline__ float4 merge_key_warps(const float* sO, int o_stride, const float* sL, int r, int c,
                                                  float& row_lse) {
  float max_lse = -INFINITY;
#pragma unroll
  for (int w = 0; w < T::kKeyWarps; ++w) max_lse = fmaxf(max_lse, sL[w * T::kBlockM + r]);
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  row_lse = -INFINITY;
  if (max_lse != -INFINITY) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < T::kKeyWarps; ++w) sum += expf(sL[w * T::kBlockM + r] - max_lse);
    row_lse = max_lse + logf(sum);
#pragma unroll
    for (int w = 0; w < T::kKeyWarps; ++w) {
      const float weight = expf(sL[w * T::kBlockM + r] - row_lse);
      const float4 x = *reinterpret_cast<const float4*>(sO + (w * T::kBlockM + r) * o_stride + c * 4);
      o.x += weight * x.x;
      o.y += weight * x.y;
      o.z += weight * x.z;
      o.w += weight * x.w;
    }
  }
  return o;
}

// Columns 4c .. 4c + 3 of packed row `row` of (batch, kv_head) into out (16-bit or f32), and its
// lse from the thread of c == 0.
template <class T>
__device__ __forceinline__ void store_out_quad(const KVCacheParams& p, int batch, int kv_head, int row, int c,
                                               float4 o, float row_lse) {
  using E = typename T::Element;
  const int token = row / p.group, head = kv_head * p.group + row % p.group;
  const int64_t at = batch * p.o_batch_stride + token * p.o_token_stride + head * p.o_head_stride + c * 4;
  if (p.out_f32) {
    *reinterpret_cast<float4*>(static_cast<float*>(p.out) + at) = o;
  } else {
    *reinterpret_cast<uint2*>(static_cast<E*>(p.out) + at) = make_uint2(sm80::pack2<E>(o.x, o.y), sm80::pack2<E>(o.z, o.w));
  }
  if (p.lse != nullptr && c == 0) {
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token * p.lse_token_stride] = row_lse;
  }
}

// Columns 4c .. 4c + 3 of partial row `part` (kv_cache_combine.cuh: oaccum / lseaccum).
template <class T>
__device__ __forceinline__ void store_partial_quad(const KVCacheParams& p, int64_t part, int c, float4 o,
                                                   float row_lse) {
  *reinterpret_cast<float4*>(p.oaccum + part * T::kHeadDim + c * 4) = o;
  if (c == 0) p.lseaccum[part] = row_lse;
}

}  // namespace fastattn::cuda
