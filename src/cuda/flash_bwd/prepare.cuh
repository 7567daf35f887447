// prepare.cuh — the backward pass's two small kernels around the main one:
//   backward_dot_kernel:        D = rowsum(dO * O) per (query row, head), fp32 (FlashAttention-2,
//                               Dao 2023, Algorithm 2 line 4), before the main kernel;
//   backward_convert_dq_kernel: dQ = scale * (sum of the dQ buffers in split order), cast to
//                               the element type and written in the caller's strides, after it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

template <typename Element>
__device__ __forceinline__ float2 unpack2(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// Token offset (elements) of query row `row` of the scratch buffers' row space: padded batches
// number rows b * seqlen_q + i, varlen batches use the global token index.
__device__ __forceinline__ int64_t query_row_offset(int64_t row, int seqlen_q, bool varlen, int64_t batch_stride,
                                                    int64_t token_stride) {
  if (varlen) return row * token_stride;
  return (row / seqlen_q) * batch_stride + (row % seqlen_q) * token_stride;
}

// One group of kLanes threads per (row, head): lane c reads 16-byte chunk c of dO and O.
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(256) backward_dot_kernel(const BackwardParams p) {
  constexpr int kChunks = kHeadDim / 8;
  constexpr int kLanes = kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  const bool valid = item < p.total_q * p.num_heads;
  const int64_t row = valid ? item / p.num_heads : 0;
  const int head = valid ? static_cast<int>(item % p.num_heads) : 0;
  const bool varlen = p.cu_seqlens_q != nullptr;
  float sum = 0.0f;
  if (valid && lane < kChunks) {
    const Element* o = static_cast<const Element*>(p.out) +
                       query_row_offset(row, p.seqlen_q, varlen, p.o_batch_stride, p.o_token_stride) +
                       head * p.o_head_stride + lane * 8;
    const Element* d = static_cast<const Element*>(p.dout) +
                       query_row_offset(row, p.seqlen_q, varlen, p.do_batch_stride, p.do_token_stride) +
                       head * p.do_head_stride + lane * 8;
    const uint4 ov = *reinterpret_cast<const uint4*>(o);
    const uint4 dv = *reinterpret_cast<const uint4*>(d);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, dw[4] = {dv.x, dv.y, dv.z, dv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 a = unpack2<Element>(ow[i]), b = unpack2<Element>(dw[i]);
      sum += a.x * b.x + a.y * b.y;
    }
  }
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (valid && lane == 0) p.d_sum[head * p.total_q + row] = sum;
}

// One thread per (row, head, 4 columns).
template <typename Element, int kHeadDim>
__global__ void __launch_bounds__(256) backward_convert_dq_kernel(const BackwardParams p) {
  constexpr int kQuads = kHeadDim / 4;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row_elems = static_cast<int64_t>(p.num_heads) * kHeadDim;
  if (idx >= p.total_q * p.num_heads * kQuads) return;
  const int64_t row = idx / (p.num_heads * kQuads);
  const int head = static_cast<int>(idx / kQuads % p.num_heads);
  const int col = static_cast<int>(idx % kQuads) * 4;
  const float* src = p.dq_accum + row * row_elems + head * kHeadDim + col;
  const int64_t split_stride = p.total_q * row_elems;
  float4 acc = *reinterpret_cast<const float4*>(src);
  for (int s = 1; s < p.num_splits; ++s) {  // fixed order: bitwise repeatable
    const float4 x = *reinterpret_cast<const float4*>(src + s * split_stride);
    acc.x += x.x;
    acc.y += x.y;
    acc.z += x.z;
    acc.w += x.w;
  }
  const bool varlen = p.cu_seqlens_q != nullptr;
  Element* dst = static_cast<Element*>(p.dq) +
                 query_row_offset(row, p.seqlen_q, varlen, p.dq_batch_stride, p.dq_token_stride) +
                 head * p.dq_head_stride + col;
  uint2 packed;
  packed.x = sm80::pack2<Element>(acc.x * p.scale, acc.y * p.scale);
  packed.y = sm80::pack2<Element>(acc.z * p.scale, acc.w * p.scale);
  *reinterpret_cast<uint2*>(dst) = packed;
}

}  // namespace fastattn::cuda
