// traits.cuh — the forward kernel's tile shapes, per (head_dim, element type, arch).
//
// A CTA owns kBlockM query rows of one (batch, head) and walks key tiles of kBlockN rows.
// Its kWarps warps split the query rows: warp w owns rows [w * kWarpRows, (w + 1) * kWarpRows),
// as kMTiles tiles of 16 rows (the MMA's M). Every warp reads the whole K and V tile.
#pragma once

#include "cuda/common/smem_layout.cuh"

namespace fastattn::cuda {

// kStages_: (K, V) buffer pairs; the main kernel has 1 (its own K/V interleaving), the
// short-query kernel a ring of kDecodeStages (launch_blocks.hpp).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, typename Element_, int kStages_ = 1>
struct ForwardTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kStages_;

  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpRows / 16;     // 16-row MMA tiles per warp
  static constexpr int kNTilesS = kBlockN / 8;       // S = Q K^T: n8 tiles over keys
  static constexpr int kKStepsQK = kHeadDim / 16;    // k16 steps over head_dim
  static constexpr int kNTilesO = kHeadDim / 8;      // O = P V: n8 tiles over head_dim
  static constexpr int kKStepsPV = kBlockN / 16;     // k16 steps over keys
  static_assert(kWarpRows % 16 == 0, "each warp owns whole 16-row MMA tiles");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "tiles are whole k16 steps");

  // sQ, sK, sV: (rows, kSmemRowElems) 16-bit, swizzled; rows are padded to a multiple of 64
  // elements (d = 96 -> 128) so the 8-chunk XOR swizzle stays inside the row.
  static constexpr int kSmemRowElems = (kHeadDim + 63) / 64 * 64;
  using Layout = SwizzledTile<kSmemRowElems>;
  static constexpr int kRowBytes = kSmemRowElems * 2;
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemK = kBlockN * kRowBytes;
  static constexpr int kSmemV = kBlockN * kRowBytes;
  static constexpr int kSmemStage = kSmemK + kSmemV;  // one (K, V) pair
  static constexpr int kSmemBytes = kSmemQ + kStages * kSmemStage;
};

}  // namespace fastattn::cuda
