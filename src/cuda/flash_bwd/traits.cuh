// traits.cuh — the backward kernel's tile shapes, warp layouts and shared-memory map, per
// (head_dim, element type), from BackwardBlocks (plan.hpp).
//
// A CTA owns kBlockN key rows of one (batch, KV head) and walks query blocks of kBlockM rows,
// for every query head that shares the KV head. Three GEMM shapes, each with a 2-D warp layout
// (flash-attn 2's AtomLayoutMSdP / AtomLayoutNdKV / AtomLayoutMdQ):
//   S, dP  (kBlockM queries x kBlockN keys): warp (wm, wn) owns a kSdPM x kSdPN tile
//   dK, dV (kBlockN keys x kHeadDim):        warp (wn, wd) owns kKVN x kKVD, in registers for
//                                            the CTA's whole life
//   dQ     (kBlockM queries x kHeadDim):     warp (wm, wd) owns kDQM x kDQD, added to fp32
// P and dS are written to shared memory (sP, sdS) once, then read by the dV/dK warps as P^T and
// dS^T (ldmatrix.trans) and by the dQ warps as dS.
#pragma once

#include "cuda/common/smem_layout.cuh"
#include "cuda/sm80/backward_arch.cuh"

namespace fastattn::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kWarpsSdPM_, int kWarpsKVN_, int kWarpsDQM_,
          int kStages_, typename Element_, bool kDqBeforeDk_ = false, class Arch_ = Sm80Backward>
struct BackwardTraits {
  using Element = Element_;
  using Arch = Arch_;  // per-arch parts: sm80/, sm75/, sm70/backward_arch.cuh
  // The tile-grid kernel's order of the last two GEMMs (plan.hpp: BackwardBlocks::dq_before_dk).
  static constexpr bool kDqBeforeDk = kDqBeforeDk_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;
  static constexpr int kThreads = kWarps * 32;

  // S, dP: warp tile kSdPM x kSdPN = kSdPTilesM m16 tiles x kSdPTilesN n8 tiles.
  static constexpr int kWarpsSdPM = kWarpsSdPM_, kWarpsSdPN = kWarps / kWarpsSdPM;
  static constexpr int kSdPM = kBlockM / kWarpsSdPM, kSdPN = kBlockN / kWarpsSdPN;
  static constexpr int kSdPTilesM = kSdPM / Arch::kTileRows, kSdPTilesN = kSdPN / Arch::kFragCols;
  static_assert(kSdPTilesM * Arch::kTileRows == kSdPM && kSdPTilesN % 2 == 0, "S tiles: MMA rows, column pairs");

  // dK, dV: warp tile kKVN keys x kKVD columns.
  static constexpr int kWarpsKVN = kWarpsKVN_, kWarpsKVD = kWarps / kWarpsKVN;
  static constexpr int kKVN = kBlockN / kWarpsKVN, kKVD = kHeadDim / kWarpsKVD;
  static constexpr int kKVTilesM = kKVN / Arch::kTileRows, kKVTilesN = kKVD / Arch::kFragCols;
  static_assert(kKVTilesM * Arch::kTileRows == kKVN && kKVTilesN % 2 == 0, "dK/dV tiles: MMA rows, column pairs");

  // dQ: warp tile kDQM queries x kDQD columns.
  static constexpr int kWarpsDQM = kWarpsDQM_, kWarpsDQD = kWarps / kWarpsDQM;
  static constexpr int kDQM = kBlockM / kWarpsDQM, kDQD = kHeadDim / kWarpsDQD;
  static constexpr int kDQTilesM = kDQM / Arch::kTileRows, kDQTilesN = kDQD / Arch::kFragCols;
  static_assert(kDQTilesM * Arch::kTileRows == kDQM && kDQTilesN % 2 == 0, "dQ tiles: MMA rows, column pairs");

  // sK, sV: (kBlockN, kRowElems); sQ, sdO: kStages x (kBlockM, kRowElems); sP, sdS:
  // (kBlockM, kBlockN); all 16-bit, in the path's layout (Arch::SmemLayout: swizzled rows
  // padded to 64 elements, or sm70's padded rows). Then per stage kBlockM floats of lse and D.
  using Layout = typename Arch::template SmemLayout<kHeadDim>;
  using LayoutP = typename Arch::template SmemLayout<kBlockN>;
  static constexpr int kRowElems = Layout::kRowElems;
  static constexpr int kSmemK = kBlockN * kRowElems * 2;
  static constexpr int kSmemQ = kBlockM * kRowElems * 2;
  static constexpr int kSmemP = kBlockM * LayoutP::kRowElems * 2;
  static constexpr int kOffV = kSmemK;
  static constexpr int kOffQ = kOffV + kSmemK;
  static constexpr int kOffDO = kOffQ + kStages * kSmemQ;
  static constexpr int kOffP = kOffDO + kStages * kSmemQ;
  static constexpr int kOffS = kOffP + kSmemP;
  static constexpr int kOffLse = kOffS + kSmemP;
  static constexpr int kOffD = kOffLse + kStages * kBlockM * 4;
  static constexpr int kSmemBytes = kOffD + kStages * kBlockM * 4;
};

}  // namespace fastattn::cuda
