// traits.cuh — the sm90 backward kernel's tiles, register split and shared-memory map, per
// (head_dim, element type). Values come from plan.hpp (host-visible, so the dispatcher sizes
// the same).
//
// Shared memory (offsets from a 1024-byte aligned base; 16-bit tiles 128-byte swizzled in
// panels of 64 columns, flash_bwd_sm90/layout.hpp):
//   sK, sV: (kBlockN, kSmemCols) each, kPanels panels of kBlockN rows (TMA; d = 96: columns
//           96..127 zero-filled)
//   sQ[kStages], sdO[kStages]: (kBlockM, kSmemCols) each, kPanels panels of kBlockM rows (TMA)
//   sdS[2]: dS^T (kBlockN keys, kBlockM queries), kBlockM / 64 panels of kBlockN rows, written
//           by the MMA warpgroups, read by the dQ wgmma as an MN-major A operand
//   sdQ[kDqBuffers][kMmaWarpgroups]: each warpgroup's (kBlockM, kDqN) fp32 dQ tile in
//        accumulator order (layout.hpp: dq_tile_index), kDqTileBytes each, the bulk
//        reduce-add's source (none at d = 256, which adds dQ atomically); step i uses buffer
//        i % kDqBuffers (plan.hpp: sm90_backward_dq_buffers, 1 by default)
//   sLse[kStages], sD[kStages]: kBlockM floats each (lse * log2 e with -inf -> +inf, and D =
//           rowsum(dO * O); rows past the sequence +inf and 0, so they give P = 0, dS = 0)
//   barriers: kv_full, q_full[kStages], q_empty[kStages], dq_full[kDqBuffers][2],
//           dq_empty[kDqBuffers][2] (8 bytes each)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/flash_bwd_sm90/plan.hpp"

namespace fastattn::cuda {

template <int kHeadDim_, typename Element_>
struct Sm90BackwardTraits {
  using Element = Element_;
  static constexpr Sm90BackwardBlocks kBlocks = sm90_backward_blocks(kHeadDim_);
  static constexpr int kHeadDim = kHeadDim_;
  // Columns of the 16-bit tiles in shared memory: whole 64-column panels (d = 96: 128, the
  // last 32 zero-filled by TMA; plan.hpp). The dV/dK/dQ GEMMs run on them; only S^T and dP^T
  // (k = head_dim) stop at kHeadDim.
  static constexpr int kSmemCols = static_cast<int>(sm90_backward_smem_columns(kHeadDim_));
  static constexpr bool kPaddedColumns = kSmemCols != kHeadDim;
  static constexpr int kBlockM = kBlocks.block_m;  // queries per step
  static constexpr int kBlockN = kBlocks.block_n;  // keys per CTA
  static constexpr int kStages = kBlocks.stages;
  static constexpr int kMmaWarpgroups = 2;  // 64 keys each, or (d = 256) half of dK/dV's columns each
  static constexpr int kMmaThreads = kMmaWarpgroups * 128;
  static constexpr int kThreads = 128 + kMmaThreads;
  static_assert(kThreads == kBlocks.threads, "plan.hpp's thread count");
  // How the MMA warpgroups share the key block (plan.hpp: Sm90BwdWarpgroupSplit). Warpgroup wg's
  // keys start at row kWgKeyRows * wg of sK / sV, its dK/dV columns at kWgDkvCols * wg.
  static constexpr bool kSplitColumns = kBlocks.split == Sm90BwdWarpgroupSplit::columns;
  static constexpr int kWgKeyRows = kSplitColumns ? 0 : 64;
  static constexpr int kDkvN = kSplitColumns ? kHeadDim / kMmaWarpgroups : kSmemCols;  // dK/dV columns per warpgroup
  static constexpr int kWgDkvCols = kSplitColumns ? kDkvN : 0;
  static_assert(kBlockN == (kSplitColumns ? 64 : 64 * kMmaWarpgroups), "one m64 key slice per MMA warpgroup");
  static_assert(kDkvN == 64 || kDkvN == 128, "wgmma.cuh's mma_rs_tb shapes");
  static_assert(kBlockM % 64 == 0 && kBlockM <= 256 && kHeadDim % 32 == 0, "whole swizzle panels, wgmma n <= 256");
  static_assert(!kPaddedColumns || !kSplitColumns, "padded columns with the key split only");

  // setmaxnreg: the producer warpgroup keeps 24, the MMA warpgroups take 240 (128 * 24 +
  // 256 * 240 = 64512 of 65536), as in the forward's 2-consumer tile.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kMmaRegisters = 240;
  static_assert(128 * kProducerRegisters + kMmaThreads * kMmaRegisters <= 65536, "register file");

  // Per MMA thread (layout.hpp's accumulator): S^T and dP^T (64 keys x kBlockM queries),
  // dK and dV (64 keys x kDkvN), dQ (one m64 x kDqN tile, below).
  static constexpr int kNTilesS = kBlockM / 8;
  static constexpr int kKStepsS = kBlockM / 16;  // k16 steps of dV += P^T dO, dK += dS^T Q
  static constexpr int kNTilesD = kDkvN / 8;

  // dQ = dS K (kBlockM = 64 queries x kHeadDim) is one m64 x (kHeadDim / 2) wgmma tile per MMA
  // warpgroup, the columns split: warpgroup wg's tile starts at column kDqN * wg (d = 128: n64,
  // a whole 64-column panel of K; d = 64: n32, half a panel, 64 bytes into its 128-byte rows;
  // d = 256: n128, two panels).
  static_assert(kBlockM == 64, "dQ: one m64 row tile");
  static constexpr int kDqN = kSmemCols / kMmaWarpgroups;
  static_assert(kDqN == 32 || kDqN == 64 || kDqN == 128, "wgmma.cuh's mma_ss_tt shapes");
  static constexpr int kKStepsDq = kBlockN / 16;
  // The bulk reduce-add's dQ tiles fit only up to d = 128 (plan.hpp); d = 256 adds atomically.
  static constexpr bool kBulkDqFits = sm90_backward_bulk_dq_fits(kHeadDim);
  static constexpr uint32_t kDqTileBytes = sm90_backward_dq_tile_bytes(kHeadDim);
  static constexpr int kDqBuffers = sm90_backward_dq_buffers(kHeadDim);  // sdQ buffers per warpgroup
  static_assert(kDqTileBytes == kBlockM * kDqN * 4, "one warpgroup's dQ tile");

  static constexpr int kPanels = kSmemCols / 64;
  static constexpr uint32_t kSmemKV = kBlockN * kSmemCols * 2;  // one of K, V
  static constexpr uint32_t kSmemQ = kBlockM * kSmemCols * 2;   // one of Q, dO, one stage
  static constexpr uint32_t kSmemDS = kBlockN * kBlockM * 2;   // one dS^T buffer
  static constexpr uint32_t kPanelBytesKV = kBlockN * 128;
  static constexpr uint32_t kPanelBytesQ = kBlockM * 128;
  static constexpr uint32_t kPanelBytesDS = kBlockN * 128;  // 64 queries x kBlockN key rows
  static constexpr uint32_t kOffsetV = kSmemKV;
  static constexpr uint32_t kOffsetQ = 2 * kSmemKV;
  static constexpr uint32_t kOffsetDO = kOffsetQ + kStages * kSmemQ;
  static constexpr uint32_t kOffsetDS = kOffsetDO + kStages * kSmemQ;
  static constexpr uint32_t kOffsetDQ = kOffsetDS + 2 * kSmemDS;
  static constexpr uint32_t kOffsetLse = kOffsetDQ + (kBulkDqFits ? kDqBuffers * kMmaWarpgroups * kDqTileBytes : 0);
  static constexpr uint32_t kOffsetD = kOffsetLse + kStages * kBlockM * 4;
  static constexpr uint32_t kOffsetBarriers = kOffsetD + kStages * kBlockM * 4;
  static constexpr int kSmemBytes = sm90_backward_smem_bytes(kBlocks, kHeadDim);
  static_assert(kOffsetDS % 1024 == 0 && kOffsetQ % 1024 == 0 && kOffsetDO % 1024 == 0, "swizzle atoms");
  static_assert(kOffsetDQ % 128 == 0 && kDqTileBytes % 128 == 0, "bulk copies: 16-byte aligned tiles");
  static_assert(kOffsetBarriers % 8 == 0, "mbarrier alignment");
  static_assert(kOffsetBarriers + 8 * (1 + 2 * kStages + 2 * kDqBuffers * kMmaWarpgroups) + 1024 <=
                    static_cast<uint32_t>(kSmemBytes),
                "smem map");
  static_assert(kSmemBytes <= 227 * 1024, "sm90 opt-in shared memory per block");

  // Padded batches; Sm90VarlenTraits below marks the varlen kernels (their code is under
  // `if constexpr (T::kVarlen)`, so the padded kernels do not change).
  static constexpr bool kVarlen = false;
};

// The same tiles for varlen batches (cu_seqlens): a CTA reads its sequence's offsets and
// lengths, TMA loads rows of the [total tokens, heads, d] tensors, scratch rows are global
// token indices.
template <class Base>
struct Sm90VarlenTraits : Base {
  static constexpr bool kVarlen = true;
};

}  // namespace fastattn::cuda
