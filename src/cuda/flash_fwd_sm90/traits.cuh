// traits.cuh — the sm90 forward kernel's tile shapes and shared-memory map, per (head_dim,
// element type). Values come from plan.hpp (host-visible, so the dispatcher sizes the same).
//
// Shared memory (offsets from a 1024-byte aligned base; every tile 128-byte swizzled in
// 64-column panels, sm90/wgmma.cuh):
//   sQ: (kBlockM, kHeadDimTile), kPanels panels of kBlockM rows x 128 bytes
//   sK[kStages], sV[kStages]: (kBlockN, kHeadDimTile) each, kPanels panels of kBlockN x 128 bytes
//   sO (where it fits): (kBlockM, kHeadDimTile), per consumer warpgroup kPanels panels of 64 x 128 bytes
//   barriers: q_full, k_full[kStages], v_full[kStages], k_empty[kStages], v_empty[kStages], q_empty
//   (8 bytes each); the dynamic scheduler's tile_full[2], tile_empty[2] and two 8-byte tile numbers
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/fragments.cuh"
#include "cuda/flash_fwd_sm90/plan.hpp"

namespace fastattn::cuda {

// kBlockN_ (0: the head dim's default) selects the wide key tile (plan.hpp: kSm90WideBlockN),
// kBlockM_ the d = 64 narrow query tile (kSm90D64NarrowBlockM) or the d = 128 short one
// (kSm90D128ShortBlockM).
template <int kHeadDim_, typename Element_, int kBlockN_ = 0, int kBlockM_ = 0>
struct Sm90ForwardTraits {
  using Element = Element_;
  static constexpr Sm90ForwardBlocks kBlocks = sm90_forward_blocks(kHeadDim_, kBlockN_, kBlockM_);
  static constexpr int kHeadDim = kHeadDim_;  // of the tensors
  static constexpr int kHeadDimTile = static_cast<int>(sm90_tile_head_dim(kHeadDim_));  // of the tiles (plan.hpp)
  static constexpr int kBlockM = kBlocks.block_m;
  static constexpr int kBlockN = kBlocks.block_n;
  // The wide key tile serves calls without a mask only (plan.hpp: sm90_wide_block_n): of a
  // query tile's key tiles only the last (visited first) can be partial.
  static constexpr bool kUnmaskedCallsOnly = kBlockN_ == kSm90WideBlockN;
  // The d = 64 narrow tile serves padded causal calls without a soft-cap (plan.hpp:
  // sm90_d64_narrow_block_m), with the overlap: only those kernels are compiled (launch.cuh).
  static constexpr bool kNarrowD64 = kBlockM_ == kSm90D64NarrowBlockM && kHeadDim_ <= 64;
  // The d = 128 short tile serves padded causal calls without a soft-cap too (plan.hpp:
  // sm90_d128_short_block_m), with the overlap, two CTAs per SM.
  static constexpr bool kShortD128 = kBlockM_ == kSm90D128ShortBlockM && kHeadDim_ > 64 && kHeadDim_ <= 128;
  static constexpr bool kOverlapFits = sm90_overlap_fits(kHeadDim_, kBlockM_);
  // Neither the wide, the narrow nor the short tile has varlen kernels (launch.cuh).
  static constexpr bool kVarlenKernels = kSm90Varlen && !kUnmaskedCallsOnly && !kNarrowD64 && !kShortD128;
  static constexpr int kCtasPerSm = sm90_ctas_per_sm(kBlocks);
  static constexpr int kStages = kBlocks.stages;
  // The first key tile's left half (plan.hpp: sm90_left_half_first_tile; consumer.cuh): 128-key
  // tiles and two consumer warpgroups only: the overlap loop's (three warpgroups run the plain
  // loop, plan.hpp sm90_overlap_fits).
  static constexpr bool kLeftHalfFirstTile =
      sm90_left_half_first_tile(kHeadDim_) && kBlocks.block_n == 128 && kBlocks.block_m / 64 == 2;
  // The softmax's share of exponentials on the FMA pipe (plan.hpp: sm90_exp2_poly_every; 0:
  // none) and its polynomial's degree: relative error 8.6e-5 at 3 under bf16's 2^-8 rounding
  // of P, 3.0e-6 at 4 under f16's 2^-11 (cuda/common/exp2_poly.hpp).
  static constexpr int kExp2PolyEvery = sm90_exp2_poly_every(kHeadDim_);
  static constexpr int kExp2PolyDegree = std::is_same_v<Element_, __half> ? 4 : 3;
  static constexpr int kConsumerWarpgroups = kBlockM / 64;
  static constexpr int kConsumerThreads = kConsumerWarpgroups * 128;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static_assert(kThreads == kBlocks.threads, "plan.hpp's thread count");
  static_assert(kBlockM % 64 == 0 && kBlockN % 16 == 0 && kBlockN <= 256, "wgmma m64, k16, n <= 256");
  static_assert(kHeadDimTile % 64 == 0 && kHeadDim % 16 == 0, "whole 128-byte swizzle panels, k16 steps");

  // setmaxnreg (multiples of 8): the producer warpgroup keeps few, the consumers take the rest
  // of the CTA's share of the 64K registers: 2 consumer warpgroups 128 * 24 + 256 * 240 =
  // 64512; 3: 128 * 32 + 384 * 160 = 65536; 1 (two CTAs per SM, 128 a thread at launch):
  // 128 * 24 + 128 * 232 = 32768.
  static constexpr int kProducerRegisters = kConsumerWarpgroups == 3 ? 32 : 24;
  static constexpr int kConsumerRegisters = kConsumerWarpgroups == 1 ? 232 : kConsumerWarpgroups == 2 ? 240 : 160;
  static_assert(128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= 65536 / kCtasPerSm,
                "register file");
  // The dynamic scheduler's kernel (kernel_dynamic.cuh) runs a second producer thread (the tile
  // fetcher) beside the load thread; at 24 registers ptxas spilled 20-24 bytes there (d = 128,
  // 256), so its producer keeps 32 and two consumer warpgroups 232 (no spill with the overlap):
  // 128 * 32 + 256 * 232 = 63488 <= 384 * 168, the registers of the launch, within which
  // setmaxnreg moves them. Three warpgroups already give the producer 32.
  static constexpr int kDynamicProducerRegisters = 32;
  static constexpr int kDynamicConsumerRegisters = kConsumerWarpgroups == 2 ? 232 : 160;
  static_assert(128 * kDynamicProducerRegisters + kConsumerThreads * kDynamicConsumerRegisters <=
                    kThreads * (65536 / kThreads / 8 * 8),
                "the launch's registers");

  static constexpr int kPanels = kHeadDimTile / 64;
  static constexpr uint32_t kSmemQ = kBlockM * kHeadDimTile * 2;
  static constexpr uint32_t kSmemKV = kBlockN * kHeadDimTile * 2;  // one K or V tile
  static constexpr uint32_t kPanelBytesQ = kBlockM * 128;
  static constexpr uint32_t kPanelBytesKV = kBlockN * 128;
  static_assert(kBlockN % 8 == 0 && kBlockM % 8 == 0, "panels of whole 1024-byte swizzle atoms");
  static constexpr uint32_t kOffsetK = kSmemQ;
  static constexpr uint32_t kOffsetV = kOffsetK + kStages * kSmemKV;
  // sO: (kBlockM, kHeadDimTile), each consumer warpgroup's 64 rows kPanels panels of 64 x 128
  // bytes (the TMA store's box); none where it does not fit (plan.hpp: sm90_output_tile_fits).
  static constexpr bool kOutputTile = sm90_output_tile_fits(kBlocks, kHeadDim_);
  static constexpr uint32_t kSmemOWarpgroup = kOutputTile ? 64 * kHeadDimTile * 2 : 0;
  static constexpr uint32_t kOffsetO = kOffsetV + kStages * kSmemKV;
  static constexpr uint32_t kOffsetBarriers = kOffsetO + kConsumerWarpgroups * kSmemOWarpgroup;
  static constexpr int kSmemBytes = sm90_forward_smem_bytes(kBlocks, kHeadDim);
  static_assert(kOffsetBarriers + 8 * (8 + 4 * kStages) + 1024 <= static_cast<uint32_t>(kSmemBytes), "smem map");

  // One consumer warp's view of its S accumulator for the shared mask code
  // (flash_fwd/tile_ops.cuh) and softmax (flash_fwd/softmax.cuh): one 16-row tile, the m16n8
  // C layout per n8 fragment.
  struct WarpTile {
    using Arch = M16n8Fragments;
    static constexpr int kMTiles = 1;
    static constexpr int kNTilesS = kBlockN / 8;
  };
  static constexpr int kNTilesS = kBlockN / 8;
  static constexpr int kNTilesO = kHeadDimTile / 8;  // O accumulator columns / 8
  static constexpr int kNTilesOStored = kHeadDim / 8;  // the columns the epilogue stores
};

}  // namespace fastattn::cuda
