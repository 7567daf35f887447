// traits.cuh — the backward kernel's tile shapes, per (head_dim, element type).
//
// A CTA owns kBlockN key rows of one (batch, KV head) and walks query blocks of kBlockM rows,
// for every query head that shares the KV head. Warp w owns key rows
// [(w % kWarpsN) * 16, + 16) and head_dim columns [(w / kWarpsN) * kWarpDims, + kWarpDims) of
// the dK and dV accumulators, which stay in registers. S^T = K Q^T and dP^T = V dO^T are
// computed with keys as rows, so P^T and dS^T are already the A operands of dV = P^T dO and
// dK = dS^T Q. Only dS^T goes through shared memory, for dQ = dS K.
#pragma once

#include "cuda/common/smem_layout.cuh"

namespace fastattn::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kWarpsD_, int kStages_, typename Element_>
struct BackwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kWarpsD = kWarpsD_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarps * 32;

  // dK, dV, S^T, dP^T: warp = (key rows, head_dim part).
  static constexpr int kWarpsN = kWarps / kWarpsD;
  static constexpr int kWarpDims = kHeadDim / kWarpsD;  // dK/dV columns per warp
  static_assert(kBlockN == 16 * kWarpsN, "one 16-row MMA tile of keys per warp");
  static constexpr int kNTilesS = kBlockM / 8;       // S^T, dP^T: n8 tiles over queries
  static constexpr int kKStepsD = kHeadDim / 16;     // k16 steps over head_dim
  static constexpr int kNTilesKV = kWarpDims / 8;    // dK, dV: n8 tiles over head_dim
  static constexpr int kKStepsM = kBlockM / 16;      // dK, dV: k16 steps over queries
  static_assert(kNTilesKV % 2 == 0, "dK/dV tiles come in ldmatrix.x4 pairs");

  // dQ = dS K: warp = (kQMTiles x 16 query rows, kQDims columns). Four column groups where
  // head_dim allows (each warp then reads a quarter of K and half of dS^T from shared memory,
  // less than with 16-row warps that read half of K each); two at d = 96.
  static constexpr int kWarpsQD = kHeadDim % 64 == 0 ? 4 : 2;
  static constexpr int kWarpsQM = kWarps / kWarpsQD;
  static constexpr int kQMTiles = kBlockM / 16 / kWarpsQM;
  static constexpr int kQDims = kHeadDim / kWarpsQD;  // dQ columns per warp
  static constexpr int kNTilesQ = kQDims / 8;
  static constexpr int kKStepsN = kBlockN / 16;       // dQ: k16 steps over keys
  static_assert(kWarpsQM * kQMTiles * 16 == kBlockM, "dQ rows: whole 16-row tiles per warp row");
  static_assert(kNTilesQ % 2 == 0, "dQ tiles come in ldmatrix.x4 pairs");

  // sK, sV: (kBlockN, kRowElems); sQ, sdO: kStages x (kBlockM, kRowElems); sdS: (kBlockN,
  // kBlockM) holding dS^T; all 16-bit, swizzled. Rows are padded to a multiple of 64 elements
  // (d = 96 -> 128) so the 8-chunk XOR swizzle stays inside the row. Then per stage kBlockM
  // floats of lse and of D.
  static constexpr int kRowElems = (kHeadDim + 63) / 64 * 64;
  using Layout = SwizzledTile<kRowElems>;
  using LayoutS = SwizzledTile<kBlockM>;
  static constexpr int kSmemK = kBlockN * kRowElems * 2;
  static constexpr int kSmemQ = kBlockM * kRowElems * 2;
  static constexpr int kSmemS = kBlockN * kBlockM * 2;
  static constexpr int kOffV = kSmemK;
  static constexpr int kOffQ = kOffV + kSmemK;
  static constexpr int kOffDO = kOffQ + kStages * kSmemQ;
  static constexpr int kOffS = kOffDO + kStages * kSmemQ;
  static constexpr int kOffLse = kOffS + kSmemS;
  static constexpr int kOffD = kOffLse + kStages * kBlockM * 4;
  static constexpr int kSmemBytes = kOffD + kStages * kBlockM * 4;
};

}  // namespace fastattn::cuda
