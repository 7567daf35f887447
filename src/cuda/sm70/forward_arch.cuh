// forward_arch.cuh — the sm70 (Volta) parts of the forward kernel (flash_fwd/kernel.cuh); the
// members mean what they mean in Sm80Forward (sm80/forward_arch.cuh).
//   MMA atom      mma.sync m8n8k4 (sm70/mma.cuh): .row.col for S = Q K^T, .row.row for O += P V
//   operands      ld.shared (Volta has no ldmatrix) from PaddedTile rows
//   copy          register-staged prefetch (common/reg_staged_copy.cuh): no cp.async
// Tiles (launch_blocks.hpp: forward_blocks_for) fit 96 KB of shared memory. f16 only.
//
// Warp tile. A warp owns 32 query rows per MMA tile (kTileRows), one 8-row slice per quad pair.
// The slices are interleaved so that lane l's A row is row l of the tile: quad pair q owns rows
// 4q..4q+3 and 16+4q..16+4q+3, its thread t (0..7) row 4q + (t & 3) + 16 (t >> 2) = lane. All
// four quad pairs multiply the same B (K or V) fragment, so one m8n8k4 covers 32 rows x 8 cols.
//
//   rows of a 32-row tile    quad pair   lanes (A rows)         C rows of lane l (half 0 / 1)
//    0- 3, 16-19             QP0         0-3, 16-19             lane_row(l) / lane_row(l) + 2
//    4- 7, 20-23             QP1         4-7, 20-23             lane_row(l) = 4 ((l >> 2) & 3)
//    8-11, 24-27             QP2         8-11, 24-27                          + (l & 1) + 16 (l >> 4)
//   12-15, 28-31             QP3         12-15, 28-31
//
// Accumulators. Per 8-column n-tile a thread holds c0..c7 = rows (r, r + 2) x columns
// {2 t1, 2 t1 + 1} (c0..c3) and {2 t1 + 4, 2 t1 + 5} (c4..c7), t1 = (lane >> 1) & 1. Stored as
// two 4-column fragments {c0..c3}, {c4..c7}: the [row0 pair, row1 pair] fragment shape of the
// sm80 path (kFragCols = 4, kHalfRows = 2), so the mask, the online softmax (row reductions over
// lane bit 1 only: kRowLaneMask = 2) and the epilogue are shared.
//
// P V from registers. The A operand of P V needs, per lane, one row and 4 keys (k-set), the
// same k-set on every row; the S accumulator gives a lane two rows (r, r + 2) with the keys
// {2 t1, 2 t1 + 1, 2 t1 + 4, 2 t1 + 5}. Per 8-key group, two m8n8k4 steps use the k-sets
// K0 = {0, 1, 4, 5} and K1 = {2, 3, 6, 7}; lane l's A row is r + 2 t1 (its half t1), so
//   t1 = 0: K0 step: own row-r pair                 K1 step: partner's row-r pair
//   t1 = 1: K0 step: partner's row-(r + 2) pair     K1 step: own row-(r + 2) pair
// one exchange with lane l ^ 2 (2 shuffles of packed f16 pairs per 8 keys): P never goes
// through shared memory. The B rows (V) are loaded in the same key order.
//
// Bank analysis (32 banks x 4 bytes; a 16-byte access per lane is served in 4 phases of 8
// consecutive lanes, an 8-byte one in 2 phases of 16 lanes). PaddedTile rows are an odd number
// R of 16-byte chunks (d = 64: 9, 96: 13, 128: 17), so chunk c of row r sits in 16-byte bank
// group (R r + c) mod 8, which for 8 consecutive rows is 8 distinct groups.
//   Q (A of S = Q K^T), ld.shared.v4: lanes 8p..8p+7 read rows 8p..8p+7 (lane l -> row l) at
//     one chunk: 8 distinct groups, conflict-free.
//   K (B of S, .col), ld.shared.v4: lane l reads key row (l & 3) + 4 (l >> 4); lanes 8p..8p+7
//     read 4 rows (keys 0-3 or 4-7) twice: same address = broadcast, 4 distinct groups.
//   V (B of P V, .row), ld.shared.v2: lanes 0-15 read 8 bytes at key rows
//     {0, 1, 4, 5} (+2 for K1) x 4 distinct addresses (the quad pairs broadcast); lanes 16-31
//     the next 8 bytes of the same rows. Word bank of row r: (4 R r + const) mod 32, R odd:
//     rows {0,1,4,5} -> offsets {0, 4R, 16R, 20R} mod 32 = 4 x {0, R, 4R, 5R} mod 8, distinct
//     and 4 banks apart, so the 2-word accesses (and the +2-word upper half) never collide.
//   Register-staged stores (st.shared.v4): 8 consecutive lanes, 8 consecutive chunks of a row.
// Without the padding (R = 8 at d = 64) the Q load would be an 8-way conflict (every row in
// the same group) and the K and V loads 4-way.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/reg_staged_copy.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/forward_path.hpp"
#include "cuda/sm70/mma.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// The quad-pair fragments and padded rows (common/fragments.cuh); kQuadPairs: the kernel calls
// sm70::gemm_qk / gemm_pv below.
struct Sm70Forward : QuadPairFragments {
  static constexpr ForwardPath kPath = ForwardPath::sm70;

  template <class T>
  using Pipe = RegStagedPipe<T>;
};

namespace sm70 {

// acc_s (kMTiles x kNTilesS 4-column fragments) = Q_warp K^T over the whole head_dim.
template <class T>
__device__ __forceinline__ void gemm_qk(float (&acc_s)[T::kMTiles][T::kNTilesS][4], uint32_t sQ, uint32_t sK,
                                        int warp_row0, int lane) {
  constexpr uint32_t kRowBytes = T::Layout::kChunks * 16;
  const uint32_t q_base = sQ + static_cast<uint32_t>(warp_row0 + lane) * kRowBytes;
  const uint32_t k_base = sK + static_cast<uint32_t>((lane & 3) + 4 * (lane >> 4)) * kRowBytes;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = 0.0f;
#pragma unroll
  for (int kc = 0; kc < T::kHeadDim / 8; ++kc) {  // 16-byte chunks: two k4 steps each
    uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) ld_shared_16(a[mt], q_base + mt * 32 * kRowBytes + kc * 16);
#pragma unroll
    for (int j = 0; j < T::kBlockN / 8; ++j) {
      uint32_t b[4];
      ld_shared_16(b, k_base + j * 8 * kRowBytes + kc * 16);
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        mma_884_rc(acc_s[mt][2 * j], acc_s[mt][2 * j + 1], a[mt][0], a[mt][1], b[0], b[1]);
        mma_884_rc(acc_s[mt][2 * j], acc_s[mt][2 * j + 1], a[mt][2], a[mt][3], b[2], b[3]);
      }
    }
  }
}

// acc_o += P V, P taken from the S accumulators in registers (one exchange with lane ^ 2 per
// 8 keys, see the header comment).
template <class T>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                        const float (&p)[T::kMTiles][T::kNTilesS][4], uint32_t sV, int lane) {
  using E = typename T::Element;
  constexpr uint32_t kRowBytes = T::Layout::kChunks * 16;
  const bool t1 = (lane & 2) != 0;
  // B row for k index i of k-set K0: key (i & 1) + 4 (i >> 1), i = lane & 3; K1: + 2.
  const uint32_t v_base = sV + static_cast<uint32_t>((lane & 1) + 4 * ((lane >> 1) & 1)) * kRowBytes +
                          static_cast<uint32_t>(lane >> 4) * 8;
#pragma unroll
  for (int j = 0; j < T::kBlockN / 8; ++j) {
    uint32_t a0[T::kMTiles][2], a1[T::kMTiles][2];  // A of the K0 and K1 steps
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // h: keys {2 t1, +1} (fragment 2j) or {2 t1 + 4, +5} (2j + 1)
        const uint32_t row0 = sm80::pack2<E>(p[mt][2 * j + h][0], p[mt][2 * j + h][1]);
        const uint32_t row1 = sm80::pack2<E>(p[mt][2 * j + h][2], p[mt][2 * j + h][3]);
        const uint32_t recv = __shfl_xor_sync(0xffffffffu, t1 ? row0 : row1, 2);
        a0[mt][h] = t1 ? recv : row0;
        a1[mt][h] = t1 ? row1 : recv;
      }
    }
#pragma unroll
    for (int nd = 0; nd < T::kHeadDim / 8; ++nd) {
      uint32_t b0[2], b1[2];
      ld_shared_8(b0, v_base + j * 8 * kRowBytes + nd * 16);
      ld_shared_8(b1, v_base + (j * 8 + 2) * kRowBytes + nd * 16);
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        mma_884_rr(acc_o[mt][2 * nd], acc_o[mt][2 * nd + 1], a0[mt][0], a0[mt][1], b0[0], b0[1]);
        mma_884_rr(acc_o[mt][2 * nd], acc_o[mt][2 * nd + 1], a1[mt][0], a1[mt][1], b1[0], b1[1]);
      }
    }
  }
}

}  // namespace sm70
}  // namespace fastattn::cuda
