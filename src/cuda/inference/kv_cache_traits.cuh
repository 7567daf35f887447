// kv_cache_traits.cuh — tile shapes of the KV-cache attention kernel (kv_cache_kernel.cuh) for one
// (element, head_dim, row tile, ring, load).
#pragma once

#include <type_traits>

#include "cuda/common/fragment_address.cuh"
#include "cuda/common/smem_layout.cuh"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/sm80/forward_arch.cuh"

namespace fastattn::cuda {

// Tile shapes of one (element, head_dim, row tile); the members tile_ops.cuh's gemm_qk /
// gemm_pv read are those of ForwardTraits (traits.cuh), for one warp's rows and keys.
template <typename Element_, int kHeadDim_, int kRows_, int kStages_ = kv_stages(kHeadDim_),
          KVLoad kLoad_ = KVLoad::cp_async>
struct KVCacheTraits {
  using Element = Element_;
  using Arch = Sm80Forward;
  static constexpr KVRowTile kTile = kv_row_tile(kRows_, kHeadDim_);
  static_assert(kTile.rows == kRows_, "a row tile of kv_cache_heuristics.hpp");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kThreads = kKVThreads;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRowWarps = kTile.row_warps;
  static constexpr int kKeyWarps = kTile.key_warps;
  static_assert(kRowWarps * kKeyWarps == kWarps, "every warp has rows and keys");
  static constexpr int kMTiles = kTile.m_tiles;  // 16-row MMA tiles per warp
  static constexpr int kWarpRows = kMTiles * 16;
  static constexpr int kBlockM = kTile.rows;
  static_assert(kBlockM == kRowWarps * kWarpRows, "row warps cover the tile");
  static constexpr int kBlockN = kv_block_n(kHeadDim);
  static constexpr int kStages = kStages_;
  static_assert(kv_stages_valid(kTile, kHeadDim_, kStages_), "a ring of kv_cache_heuristics.hpp");
  static constexpr int kWarpKeys = kBlockN / kKeyWarps;  // keys of a tile per key warp
  static_assert(kWarpKeys % 16 == 0, "whole k16 steps of P V per warp");
  static constexpr int kNTilesS = kWarpKeys / 8;
  static constexpr int kKStepsQK = kHeadDim / 16;
  static constexpr int kNTilesO = kHeadDim / 8;
  static constexpr int kKStepsPV = kWarpKeys / 16;
  using Layout = typename Arch::template SmemLayout<kHeadDim>;
  static constexpr int kSmemRowElems = Layout::kRowElems;
  static constexpr int kRowBytes = kSmemRowElems * 2;
  static_assert(kRowBytes == kv_row_bytes(kHeadDim), "the plan sizes shared memory from kv_row_bytes");
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kSmemQ = kBlockM * kRowBytes;
  static constexpr int kSmemKV = kBlockN * kRowBytes;
  static constexpr int kSmemStage = 2 * kSmemKV;  // K then V
  static constexpr int kOStride = kHeadDim + 8;   // f32 row stride of the epilogue partials
  // K/V loads (kv_cache_heuristics.hpp: KVLoad). TMA writes a tile as kPanels 64-column panels
  // of kBlockN 128-byte rows (fragment_address.cuh: PanelFragmentAddress); cp.async writes
  // SwizzledTile rows of kRowBytes. Either way a tile takes kSmemKV bytes.
  static constexpr bool kTma = kLoad_ == KVLoad::tma;
  using Panels = PanelTile<kBlockN>;  // a K or V tile as TMA writes it
  static constexpr int kPanels = kRowBytes / 128;
  static constexpr int kPanelBytes = Panels::kPanelBytes;
  static_assert(kPanels * kPanelBytes == kSmemKV, "panels cover the tile");
  static constexpr int kKeyRowBytes = kTma ? 128 : kRowBytes;  // from one key row to the next
  static_assert(kSmemQ % 1024 == 0, "the ring starts on TMA's 1024-byte swizzle period");
  static constexpr int kSmemBarriers = kSmemQ + kv_ring_or_epilogue_bytes(kTile, kHeadDim, kStages);  // TMA: stage mbarriers
  static constexpr int kSmemBytes = kv_smem_bytes(kTile, kHeadDim, kStages, kLoad_);
  static_assert(!kTma || kSmemBytes >= kSmemBarriers + 8 * kStages + 1024, "the barriers and the alignment fit");
  static_assert(kSmemBytes >= kSmemQ + kStages * kSmemStage, "the ring fits");
  using FragQ = FragmentAddress<kSmemRowElems, LanePattern::kA>;  // Q: cp.async, SwizzledTile rows
  using FragK = std::conditional_t<kTma, PanelFragmentAddress<kBlockN, LanePattern::kB>,
                                   FragmentAddress<kSmemRowElems, LanePattern::kB>>;
  using FragV = std::conditional_t<kTma, PanelFragmentAddress<kBlockN, LanePattern::kBTrans>,
                                   FragmentAddress<kSmemRowElems, LanePattern::kBTrans>>;
  static_assert(kSmemBytes >= kSmemQ + kKeyWarps * kBlockM * (kOStride + 1) * 4, "the epilogue fits");
  static_assert(kSmemBytes >= kSmemQ + kWarps * kKVMaxSplits * 4, "the fused combine's weights fit");
  static constexpr int kCopyIters = kBlockN * kChunks / kThreads;  // 16-byte copies per thread per tensor
  static_assert(kBlockN * kChunks % kThreads == 0, "whole copy passes");
  static constexpr int kMinCtasPerSm = kv_launch_ctas_per_sm(kTile, kStages);
};

}  // namespace fastattn::cuda
