// kv_cache_combine.cuh — merges the key splits of the KV-cache attention (kv_cache_kernel.cuh)
// into the output, as flash_fwd/combine.cuh does for forward():
//
//   lse = log sum_s exp(lse_s),   out = sum_s exp(lse_s - lse) * O_s
//
// O_s is normalised by split s's own row sum; a split that saw no key of a row has lse_s = -inf
// and weight exactly 0 (its O_s does not enter the sum); a row no split saw gets out 0 and lse -inf.
// The partials are indexed by packed rows (row = token * group + head within a KV head):
//   oaccum   (splits, batch, kv_heads, rows, head_dim) f32
//   lseaccum (splits, batch, kv_heads, rows) f32
// One warp per packed row; lane l reads float4 chunks l, l + 32, ... of each split's row.
// The combine kernel's grid: (ceil(rows / kKVCombineWarps), kv_heads, batch). The fused form
// (kv_cache_heuristics.hpp: KVCombine::fused) runs the same rows in the attention kernel.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

constexpr int kKVCombineWarps = 4;

// One packed row of (batch, kv_head): its splits' lse and partial rows merged into out (and
// lse), by one warp; weight: this warp's kKVMaxSplits floats of shared memory. The combine
// kernel and the fused combine (kv_cache_kernel.cuh, the last split of a row block) both call
// it, so the two give the same bits. Partials are read through L2 (__ldcg): in the fused form
// other SMs wrote them during this launch.
template <typename Element, int kHeadDim>
__device__ __forceinline__ void kv_combine_row(const KVCacheParams& p, int batch, int kv_head, int row, float* weight,
                                               int lane) {
  static_assert(kHeadDim % 4 == 0, "rows are read as float4");
  constexpr int kQuads = kHeadDim / 4;
  constexpr int kQuadsPerLane = (kQuads + 31) / 32;
  constexpr int kBatch = 16 / kQuadsPerLane;  // splits whose partial rows are in flight at once
  const int num_splits = p.num_splits;
  const int64_t split_stride = static_cast<int64_t>(p.batch) * p.num_kv_heads * p.rows;  // rows per split
  const int64_t row0 = (static_cast<int64_t>(batch) * p.num_kv_heads + kv_head) * p.rows + row;

  // The partials of the first kBatch splits are loaded with the lse values, before the weights
  // are known: all of them are in flight at once, so the merge costs one L2 round trip for up to
  // kBatch splits instead of one per unrolled group (the fused combine is the serial tail of a
  // split launch: kv_cache_heuristics.hpp). Every split writes its partial row, so the loads are
  // of written values; a weight of 0 still skips its row, as before.
  float4 batch_rows[kBatch][kQuadsPerLane];
  auto load_batch = [&](int s0) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const float4* o_row = reinterpret_cast<const float4*>(p.oaccum + (row0 + (s0 + j) * split_stride) * kHeadDim);
#pragma unroll
      for (int c = 0; c < kQuadsPerLane; ++c) {
        const int quad = lane + 32 * c;
        batch_rows[j][c] = s0 + j < num_splits && quad < kQuads ? __ldcg(o_row + quad) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  };

  float max_lse = -INFINITY;
  for (int s = lane; s < num_splits; s += 32) {
    const float l = __ldcg(p.lseaccum + row0 + s * split_stride);
    weight[s] = l;
    max_lse = fmaxf(max_lse, l);
  }
  load_batch(0);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  const bool empty = max_lse == -INFINITY;
  float sum = 0.0f;
  for (int s = lane; s < num_splits; s += 32) sum += empty ? 0.0f : expf(weight[s] - max_lse);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float lse = empty ? -INFINITY : max_lse + logf(sum);
  for (int s = lane; s < num_splits; s += 32) weight[s] = empty ? 0.0f : expf(weight[s] - lse);
  __syncwarp();

  // out = sum_s w_s O_s in split order (the same order, and so the same bits, as one load per
  // split: the fused and the separate combine agree).
  float4 acc[kQuadsPerLane];
#pragma unroll
  for (int c = 0; c < kQuadsPerLane; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = 0; s0 < num_splits; s0 += kBatch) {
    if (s0 > 0) load_batch(s0);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j >= num_splits) break;
      const float w = weight[s0 + j];
      if (w == 0.0f) continue;  // warp-uniform
#pragma unroll
      for (int c = 0; c < kQuadsPerLane; ++c) {
        acc[c].x += w * batch_rows[j][c].x;
        acc[c].y += w * batch_rows[j][c].y;
        acc[c].z += w * batch_rows[j][c].z;
        acc[c].w += w * batch_rows[j][c].w;
      }
    }
  }
  __syncwarp();  // weight[] is reused by the warp's next row

  const int token = row / p.group, head = kv_head * p.group + row % p.group;
  if (p.out_f32) {  // the cooperative step's unrounded partial (kv_cache_params.hpp: out_f32)
    float* f_ptr = static_cast<float*>(p.out) + batch * p.o_batch_stride + token * p.o_token_stride +
                   head * p.o_head_stride;
#pragma unroll
    for (int c = 0; c < kQuadsPerLane; ++c) {
      const int quad = lane + 32 * c;
      if (quad < kQuads) *reinterpret_cast<float4*>(f_ptr + quad * 4) = acc[c];
    }
    if (p.lse != nullptr && lane == 0) {
      p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token * p.lse_token_stride] = lse;
    }
    return;
  }
  Element* o_ptr = static_cast<Element*>(p.out) + batch * p.o_batch_stride + token * p.o_token_stride +
                   head * p.o_head_stride;
#pragma unroll
  for (int c = 0; c < kQuadsPerLane; ++c) {
    const int quad = lane + 32 * c;
    if (quad < kQuads) {
      *reinterpret_cast<uint2*>(o_ptr + quad * 4) =
          make_uint2(sm80::pack2<Element>(acc[c].x, acc[c].y), sm80::pack2<Element>(acc[c].z, acc[c].w));
    }
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + token * p.lse_token_stride] = lse;
  }
}

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kKVCombineWarps * 32) kv_cache_combine_kernel(const KVCacheParams p) {
  // weight[warp][s]: this warp's row's lse_s, then exp(lse_s - lse).
  __shared__ float weight[kKVCombineWarps][kKVMaxSplits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kKVCombineWarps + warp;
  if (row >= p.rows) return;  // warp-uniform; no block-wide barrier follows
  kv_combine_row<Element, kHeadDim>(p, blockIdx.z, blockIdx.y, row, weight[warp], lane);
}

}  // namespace fastattn::cuda
