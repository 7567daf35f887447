// epilogue.cuh — where a forward CTA's rows go: the output (O / l in the element type, and the
// lse), or, in split-KV mode, the f32 partials of its key split (split_layout.hpp).
//
// A thread holds, per MMA row tile mt, rows A::lane_row(lane) and + A::kHalfRows and, per
// fragment of A::kFragCols head_dim columns, two adjacent columns from A::lane_col(lane)
// (sm80: rows g, g + 8 with g = lane / 4, columns 2 (lane % 4); the accumulator layouts are
// in sm80/mma.cuh and sm70/mma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/split_layout.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Which rows of which sequence a CTA owns.
struct RowBlock {
  bool varlen;
  int64_t q_start;  // varlen: the sequence's first token; else 0
  int batch, head;
  int q0;           // first query row of the block, within the sequence
  int len_q;        // the sequence's query count
};

// out (bf16/f16) = acc_o / l; lse (natural log) when requested. Rows that saw no key have
// inv_sum 0 and lse -inf (softmax.cuh), so they get 0 and -inf.
template <class T>
__device__ __forceinline__ void store_output(const ForwardParams& p, const RowBlock& b,
                                             const float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                             const float (&inv_sum)[2 * T::kMTiles],
                                             const float (&lse)[2 * T::kMTiles], int warp_row0, int lane) {
  using E = typename T::Element;
  using A = typename T::Arch;
  E* o_ptr = static_cast<E*>(p.out) + (b.varlen ? b.q_start * p.o_token_stride : b.batch * p.o_batch_stride) +
             b.head * p.o_head_stride;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = b.q0 + warp_row0 + mt * A::kTileRows + A::lane_row(lane) + half * A::kHalfRows;
      if (row >= b.len_q) continue;
      const float inv = inv_sum[2 * mt + half];
      E* o_row = o_ptr + static_cast<int64_t>(row) * p.o_token_stride + A::lane_col(lane);
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        *reinterpret_cast<uint32_t*>(o_row + nt * A::kFragCols) =
            sm80::pack2<E>(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
      }
      if (p.lse != nullptr && A::row_leader(lane)) {
        float* lse_ptr = p.lse + (b.varlen ? (b.q_start + row) * p.lse_token_stride
                                           : b.batch * p.lse_batch_stride + row * p.lse_token_stride) +
                         b.head * p.lse_head_stride;
        *lse_ptr = lse[2 * mt + half];
      }
    }
}

// Split-KV: this split's O (normalised by its own row sum; 0 for rows that saw no key of the
// split) and lse (-inf then) to oaccum / lseaccum, f32. Every row of the block below len_q is
// written, also by splits whose key range is empty, so the combine never reads stale scratch.
template <class T>
__device__ __forceinline__ void store_partial(const ForwardParams& p, const RowBlock& b, int split,
                                              const float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                              const float (&inv_sum)[2 * T::kMTiles],
                                              const float (&lse)[2 * T::kMTiles], int warp_row0, int lane) {
  using A = typename T::Arch;
  // Scratch row of token 0: padded batches lay sequences seqlen_q rows apart.
  const int64_t token_base = b.varlen ? b.q_start : static_cast<int64_t>(b.batch) * p.seqlen_q;
  const int64_t row_base = split_row(split, b.head, token_base, p.num_heads, p.total_q);
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = b.q0 + warp_row0 + mt * A::kTileRows + A::lane_row(lane) + half * A::kHalfRows;
      if (row >= b.len_q) continue;
      const float inv = inv_sum[2 * mt + half];
      // (head_dim) f32 row; 8-byte stores: a quad writes 32 contiguous bytes per n8 tile.
      float* o_row = p.oaccum + (row_base + row) * T::kHeadDim + A::lane_col(lane);
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        *reinterpret_cast<float2*>(o_row + nt * A::kFragCols) =
            make_float2(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
      }
      if (A::row_leader(lane)) p.lseaccum[row_base + row] = lse[2 * mt + half];
    }
}

}  // namespace fastattn::cuda
