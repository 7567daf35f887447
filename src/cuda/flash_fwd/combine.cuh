// combine.cuh — merges the split-KV partials (split_layout.hpp) into the output:
//
//   lse = log sum_s exp(lse_s),   out = sum_s exp(lse_s - lse) * O_s
//
// O_s is already normalised by split s's own row sum, so exp(lse_s - lse) is the share of the
// row's softmax mass that split s saw (flash-attn 2's combine_attn_seqk_parallel, and
// Flash-Decoding). Splits that saw no key of a row have lse_s = -inf and weight exactly 0; a row
// no split saw gets out 0 and lse -inf, as the non-split kernels write.
//
// One warp per (head, query token) row: lane l reads float4 chunks l, l + 32, ... of each
// split's (head_dim) f32 row, so every split is one coalesced 4 * head_dim-byte read. The grid
// is (ceil(seqlen_q / kWarps), heads, batch) like the forward, so varlen sequences touch only
// their own tokens (tokens outside every sequence are never written).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/split_layout.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

constexpr int kCombineWarps = 4;
constexpr int kCombineMaxSplits = 128;  // heuristics.hpp: kMaxSplits

template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(kCombineWarps * 32) flash_combine_kernel(const ForwardParams p) {
  static_assert(kHeadDim % 4 == 0, "rows are read as float4");
  constexpr int kChunks = kHeadDim / 4;                 // float4 chunks per row
  constexpr int kChunksPerLane = (kChunks + 31) / 32;   // 1 for d <= 128, 2 for d = 256
  // weight[warp][s]: this warp's row's lse_s, then exp(lse_s - lse).
  __shared__ float weight[kCombineWarps][kCombineMaxSplits];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int token = blockIdx.x * kCombineWarps + warp;
  const int head = blockIdx.y, batch = blockIdx.z;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int len_q = varlen ? p.cu_seqlens_q[batch + 1] - static_cast<int>(q_start) : p.seqlen_q;
  if (token >= len_q) return;  // warp-uniform; no block-wide barrier follows

  const int num_splits = p.num_splits;
  const int64_t token_row = (varlen ? q_start : static_cast<int64_t>(batch) * p.seqlen_q) + token;
  const int64_t split_stride = static_cast<int64_t>(p.num_heads) * p.total_q;  // rows per split
  const int64_t row0 = split_row(0, head, token_row, p.num_heads, p.total_q);

  // ---- lse over the splits: max, then log-sum-exp around it ------------------------------------
  float max_lse = -INFINITY;
  for (int s = lane; s < num_splits; s += 32) {
    const float l = p.lseaccum[row0 + s * split_stride];
    weight[warp][s] = l;
    max_lse = fmaxf(max_lse, l);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
  const bool empty = max_lse == -INFINITY;  // no split saw a key of this row
  float sum = 0.0f;
  for (int s = lane; s < num_splits; s += 32) sum += empty ? 0.0f : expf(weight[warp][s] - max_lse);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float lse = empty ? -INFINITY : max_lse + logf(sum);  // sum >= 1: the max term is 1
  for (int s = lane; s < num_splits; s += 32) weight[warp][s] = empty ? 0.0f : expf(weight[warp][s] - lse);
  __syncwarp();

  // ---- out = sum_s weight_s * O_s -----------------------------------------------------------------
  float4 acc[kChunksPerLane];
#pragma unroll
  for (int c = 0; c < kChunksPerLane; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
  for (int s = 0; s < num_splits; ++s) {
    const float w = weight[warp][s];
    if (w == 0.0f) continue;  // warp-uniform: a split that saw nothing of this row (or underflow)
    const float4* o_row = reinterpret_cast<const float4*>(p.oaccum + (row0 + s * split_stride) * kHeadDim);
#pragma unroll
    for (int c = 0; c < kChunksPerLane; ++c) {
      const int chunk = lane + 32 * c;
      if (chunk < kChunks) {
        const float4 v = o_row[chunk];
        acc[c].x += w * v.x;
        acc[c].y += w * v.y;
        acc[c].z += w * v.z;
        acc[c].w += w * v.w;
      }
    }
  }

  // ---- out (caller's strides; rows are 16-byte aligned, cuda_backend.cu) and lse ------------------
  Element* o_ptr = static_cast<Element*>(p.out) +
                   (varlen ? (q_start + token) * p.o_token_stride
                           : batch * p.o_batch_stride + static_cast<int64_t>(token) * p.o_token_stride) +
                   head * p.o_head_stride;
#pragma unroll
  for (int c = 0; c < kChunksPerLane; ++c) {
    const int chunk = lane + 32 * c;
    if (chunk < kChunks) {
      const uint2 packed = make_uint2(sm80::pack2<Element>(acc[c].x, acc[c].y), sm80::pack2<Element>(acc[c].z, acc[c].w));
      *reinterpret_cast<uint2*>(o_ptr + chunk * 4) = packed;
    }
  }
  if (p.lse != nullptr && lane == 0) {
    p.lse[(varlen ? (q_start + token) * p.lse_token_stride
                  : batch * p.lse_batch_stride + static_cast<int64_t>(token) * p.lse_token_stride) +
          head * p.lse_head_stride] = lse;
  }
}

}  // namespace fastattn::cuda
