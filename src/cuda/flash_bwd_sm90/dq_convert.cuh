// dq_convert.cuh — the tile modes' convert kernel (bulk and atomic_tiles dQ): dQ = scale * the
// tile-ordered fp32 accumulator that dq_writer.cuh's bulk reduce-adds or v4 reductions fill (layout.hpp: dq_first_tile_row,
// dq_tile_index), cast to the element type and written in the caller's strides. The atomic mode
// keeps the [total_q][heads][head_dim] accumulator and flash_bwd/prepare.cuh's convert kernel.
//
// One CTA of 128 threads per (batch, query block, head, warpgroup tile): thread t reads its
// float4 of each n8 slice of the tile (a warp reads 512 contiguous bytes), puts the four floats
// at their rows and columns of a row-major shared tile, and then the CTA writes the rows inside
// the sequence, 4 columns (8 bytes) a thread, scaled. Both tile modes (atomic_tiles and bulk)
// fill the same accumulator.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd/prepare.cuh"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

template <class T>
__global__ void __launch_bounds__(128) sm90_convert_dq_tiles_kernel(const BackwardParams p) {
  static_assert(T::kBlockM == 64, "64-row warpgroup tiles");
  using Element = typename T::Element;
  constexpr int kTileFloats = T::kDqTileBytes / 4;  // 128 threads x kDqN / 2
  // sDq: (kBlockM, kDqN) fp32 row-major, rows padded by 8 floats: a half-warp's float2 stores
  // (4 rows x 8 columns) then hit 32 distinct banks.
  constexpr int kRowFloats = T::kDqN + 8;
  __shared__ __align__(16) float s_dq[T::kBlockM * kRowFloats];

  const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  int64_t cta = blockIdx.x;
  const int wg = static_cast<int>(cta % T::kMmaWarpgroups);
  cta /= T::kMmaWarpgroups;
  const int head = static_cast<int>(cta % p.num_heads);
  cta /= p.num_heads;
  const int m = static_cast<int>(cta % m_blocks);
  const int batch = static_cast<int>(cta / m_blocks);
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int len_q = varlen ? p.cu_seqlens_q[batch + 1] - static_cast<int>(q_start) : p.seqlen_q;
  const int q0 = m * T::kBlockM;
  if (q0 >= len_q) return;  // a varlen sequence shorter than the longest: uniform over the CTA

  const int64_t tile_row = sm90_layout::dq_first_tile_row(varlen, batch, q_start, p.seqlen_q, T::kBlockM) + m;
  const float* src = p.dq_accum + ((tile_row * p.num_heads + head) * T::kMmaWarpgroups + wg) * kTileFloats;
  const int t = static_cast<int>(threadIdx.x);
#pragma unroll
  for (int nt = 0; nt < T::kDqN / 8; ++nt) {
    const float4 v = *reinterpret_cast<const float4*>(src + sm90_layout::dq_tile_index(t, nt, 0));
    const int row = sm90_layout::acc_row(t, 0), col = sm90_layout::acc_col(t, nt, 0);
    *reinterpret_cast<float2*>(&s_dq[row * kRowFloats + col]) = make_float2(v.x, v.y);
    *reinterpret_cast<float2*>(&s_dq[(row + 8) * kRowFloats + col]) = make_float2(v.z, v.w);
  }
  __syncthreads();

  // d = 96: warpgroup 1's tile holds columns 64..127 of the padded K, of which 64..95 exist.
  constexpr int kLastCols = T::kHeadDim - T::kDqN * (T::kMmaWarpgroups - 1);
  const int quads = (wg == T::kMmaWarpgroups - 1 ? kLastCols : T::kDqN) / 4;
  const int rows = len_q - q0 < T::kBlockM ? len_q - q0 : T::kBlockM;
  for (int i = t; i < rows * quads; i += 128) {
    const int r = i / quads, col = i % quads * 4;
    const float4 v = *reinterpret_cast<const float4*>(&s_dq[r * kRowFloats + col]);
    const int64_t row = varlen ? q_start + q0 + r : static_cast<int64_t>(batch) * p.seqlen_q + q0 + r;
    Element* dst = static_cast<Element*>(p.dq) +
                   query_row_offset(row, p.seqlen_q, varlen, p.dq_batch_stride, p.dq_token_stride) +
                   head * p.dq_head_stride + T::kDqN * wg + col;
    uint2 packed;
    packed.x = sm80::pack2<Element>(v.x * p.scale, v.y * p.scale);
    packed.y = sm80::pack2<Element>(v.z * p.scale, v.w * p.scale);
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

}  // namespace fastattn::cuda
