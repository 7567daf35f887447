// traits.cuh — the forward kernel's tile shapes, per (head_dim, element type, arch).
//
// A CTA owns kBlockM query rows of one (batch, head) and walks key tiles of kBlockN rows.
// Its kWarps warps split the query rows: warp w owns rows [w * kWarpRows, (w + 1) * kWarpRows),
// as kMTiles tiles of Arch::kTileRows rows (16 on sm80/sm75, the MMA's M; 32 on sm70, four
// quad pairs). Every warp reads the whole K and V tile.
//
// Arch_ is the per-architecture policy (sm80/forward_arch.cuh, sm75/..., sm70/...): MMA atom,
// shared-memory layout, global -> shared copy and accumulator fragment coordinates.
#pragma once

#include "cuda/common/smem_layout.cuh"
#include "cuda/sm80/forward_arch.cuh"

namespace fastattn::cuda {

// kStages_: (K, V) buffer pairs; the main kernel has 1 (its own K/V interleaving), the
// short-query kernel a ring of kDecodeStages (launch_blocks.hpp).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, typename Element_, int kStages_ = 1,
          class Arch_ = Sm80Forward>
struct ForwardTraits {
  using Element = Element_;
  using Arch = Arch_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = kStages_;

  static constexpr int kWarpRows = kBlockM / kWarps;
  static constexpr int kMTiles = kWarpRows / Arch::kTileRows;  // MMA row tiles per warp
  static constexpr int kNTilesS = kBlockN / Arch::kFragCols;    // S = Q K^T: fragments over keys
  static constexpr int kKStepsQK = kHeadDim / 16;               // k16 steps over head_dim
  static constexpr int kNTilesO = kHeadDim / Arch::kFragCols;   // O = P V: fragments over head_dim
  static constexpr int kKStepsPV = kBlockN / 16;                // k16 steps over keys
  static_assert(kWarpRows % Arch::kTileRows == 0, "each warp owns whole MMA row tiles");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "tiles are whole k16 steps");

  // sQ, sK, sV: (rows, kSmemRowElems) 16-bit in the arch's layout: sm80/sm75 swizzled, rows
  // padded to a multiple of 64 elements (d = 96 -> 128) so the 8-chunk XOR swizzle stays
  // inside the row; sm70 rows of an odd number of 16-byte chunks (smem_layout.cuh).
  using Layout = typename Arch::template SmemLayout<kHeadDim>;
  static constexpr int kSmemRowElems = Layout::kRowElems;
  static constexpr int kRowBytes = kSmemRowElems * 2;
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemK = kBlockN * kRowBytes;
  static constexpr int kSmemV = kBlockN * kRowBytes;
  static constexpr int kSmemStage = kSmemK + kSmemV;  // one (K, V) pair
  static constexpr int kSmemBytes = kSmemQ + kStages * kSmemStage;
};

}  // namespace fastattn::cuda
