// plan.hpp — the backward launcher's tile sizes, split count and scratch size. Host-only (no
// CUDA headers) so the dispatcher can report them; launch.cuh instantiates the same blocks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/environment.hpp"
#include "cuda/common/scratch_align.hpp"
#include "cuda/forward_path.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// Per head_dim, flash-attn 2's sm80 backward tiles (kernel_traits_sm80 / launch_template):
// a CTA owns block_n keys and walks query blocks of block_m rows. Each of the kernel's three
// GEMM shapes has its own 2-D warp layout, so every warp computes a 32 x 32 or larger tile (16 x
// 32 for S at d = 256) and reads less of its operands from shared memory than 16-row warps would:
//   S = Q K^T, dP = dO V^T   (block_m x block_n):  warps_sdp_m x (warps / warps_sdp_m)
//   dV = P^T dO, dK = dS^T Q (block_n x head_dim): warps_kv_n x (warps / warps_kv_n)
//   dQ = dS K                (block_m x head_dim): warps_dq_m x (warps / warps_dq_m)
// P and dS go through shared memory between the first shape and the other two.
struct BackwardBlocks {
  int block_m;  // query rows per inner step
  int block_n;  // key rows per CTA
  int warps;
  int warps_sdp_m;  // warps along queries for S and dP
  int warps_kv_n;   // warps along keys for dK and dV
  int warps_dq_m;   // warps along queries for dQ
  int stages;       // Q/dO shared-memory buffers (1 at d = 256 to fit the sm80 smem limit)
  // The tile-grid kernel (unmasked calls, plan_tile_grid) computes dQ = dS K and issues its
  // reductions before dK += dS^T Q instead of after it, so the reductions' latency overlaps the dK
  // GEMM. d = 64: +0.4-1.1% on the H200 (b1-4 h32 s4k-16k, A/B in one job); at d = 128, and in
  // the masked kernel at d = 64, it lost 3-5%.
  bool dq_before_dk = false;
};
constexpr BackwardBlocks backward_blocks(int head_dim) {
  // d <= 64: S/dP warps 4 x 2 (32 queries x 64 keys each; flash-attn 2's layout there): +2.6%
  //   over 2 x 4 on the H200 (A/B in one job, b2 h32 s8k).
  // d = 96: dQ warps split head_dim in two (48 columns = 6 n8 tiles; a quarter would be 3).
  return head_dim <= 64    ? BackwardBlocks{128, 128, 8, 4, 4, 4, 2, true}
         : head_dim <= 96  ? BackwardBlocks{64, 128, 8, 2, 4, 4, 2, false}
         : head_dim <= 128 ? BackwardBlocks{64, 128, 8, 2, 4, 2, 2, false}
                           : BackwardBlocks{64, 64, 8, 4, 2, 2, 1, false};
}

// GPUs with 99 KB of shared memory per block (sm86 / sm89: A10, L4, L40, RTX 30/40) take
// flash-attn 2's smaller sm86 tiles: 64 query rows, and 64 keys with one Q/dO stage above
// d = 64. d = 256 has none (an `unsupported` error there).
constexpr bool has_small_backward_blocks(int head_dim) { return head_dim <= 128; }
constexpr BackwardBlocks backward_blocks_small(int head_dim) {
  return head_dim <= 64    ? BackwardBlocks{64, 128, 8, 2, 4, 4, 2, false}
         : head_dim <= 96  ? BackwardBlocks{64, 64, 8, 2, 4, 4, 1, false}
                           : BackwardBlocks{64, 64, 8, 2, 4, 2, 1, false};
}

// The Turing path (FASTATTN_CUDA_PATH=sm75 or a compute capability 7.5 GPU; sm75/backward_arch.cuh):
// 64 KB of shared memory per block, one Q/dO stage. d = 64: 64 x 64 tiles (49 KB); d = 128: 32
// query rows x 64 keys (56 KB); d = 96 (rows padded to 128) the same tiles with 4 warps, because
// 8 warps cannot split its 96 columns into whole n16 pieces for dQ at 32 rows. No d = 256.
constexpr bool has_sm75_backward_blocks(int head_dim) { return head_dim <= 128; }
constexpr BackwardBlocks backward_blocks_sm75(int head_dim) {
  return head_dim <= 64   ? BackwardBlocks{64, 64, 8, 4, 4, 4, 1, false}
         : head_dim <= 96 ? BackwardBlocks{32, 64, 4, 2, 4, 2, 1, false}
                          : BackwardBlocks{32, 64, 8, 2, 4, 2, 1, false};
}

// The Volta path (sm70/backward_arch.cuh): 32-row warp tiles, padded rows (an odd number of
// 16-byte chunks), one Q/dO stage; 64 x 64 tiles within a V100's 96 KB: d = 64 4 warps (54 KB),
// d = 96 and 128 8 warps (d = 128: 86 KB). No d = 256.
constexpr bool has_sm70_backward_blocks(int head_dim) { return head_dim <= 128; }
constexpr BackwardBlocks backward_blocks_sm70(int head_dim) {
  return head_dim <= 64 ? BackwardBlocks{64, 64, 4, 2, 2, 2, 1, false} : BackwardBlocks{64, 64, 8, 2, 2, 2, 1, false};
}

// Shared memory of a configuration, bytes (traits.cuh's map, which static_asserts the same):
// K, V; stages x (Q, dO); P, dS; stages x (lse, D). Rows padded to 64 elements, or with
// `padded_rows` (sm70) to an odd number of 16-byte chunks.
constexpr int backward_row_bytes(int row_elems, bool padded_rows) {
  return padded_rows ? (row_elems / 8 % 2 == 0 ? row_elems / 8 + 1 : row_elems / 8) * 16 : (row_elems + 63) / 64 * 64 * 2;
}
constexpr int backward_smem_bytes(const BackwardBlocks& b, int head_dim, bool padded_rows = false) {
  const int row_bytes = backward_row_bytes(head_dim, padded_rows);
  return 2 * b.block_n * row_bytes + 2 * b.stages * b.block_m * row_bytes +
         2 * b.block_m * backward_row_bytes(b.block_n, padded_rows) + 2 * b.stages * b.block_m * 4;
}

// FASTATTN_CUDA_BWD_BLOCKS=small takes the small configuration on any GPU (tests run it on
// large ones); unset or `default`: by the shared-memory limit.
inline bool small_backward_blocks_forced() { return env_switch(EnvVar::cuda_bwd_blocks, "small", "default", false); }

// The configuration for head_dim on a GPU with smem_per_block bytes of opt-in shared memory
// (0: unknown, take the default): the default one where it fits, else the small one.
inline BackwardBlocks choose_backward_blocks(int head_dim, int smem_per_block, bool* small = nullptr) {
  const BackwardBlocks big = backward_blocks(head_dim);
  const bool use_small = has_small_backward_blocks(head_dim) &&
                         (small_backward_blocks_forced() ||
                          (smem_per_block > 0 && backward_smem_bytes(big, head_dim) > smem_per_block));
  if (small != nullptr) *small = use_small;
  return use_small ? backward_blocks_small(head_dim) : big;
}

// Tail split (wave quantization). Without a mask every CTA of the grid (one key block of one
// (batch, KV head): a "tile") does the same work, and one CTA fits an SM, so the grid runs in
// waves of num_sms tiles. When tiles is not a multiple of num_sms the last wave leaves most SMs
// idle: b2 h32 s8k d64 is 4096 tiles = 31 waves on 132 SMs plus 4 tiles alone in a 32nd (on the
// H200 the backward ran 273 TFLOP/s there and 282 at h33, whose 4224 tiles fill 32 waves).
// The last `tiles` tiles are instead cut into `pieces` pieces each, every piece a contiguous
// range of the tile's query blocks; pieces add their dK/dV into fp32 scratch and the last piece
// of a tile to finish writes dK/dV (kernel.cuh). Cost model, in query-block steps of one CTA: a
// tile is `steps` (query blocks x query heads per KV head); a piece is its share plus
// kTailPieceSteps (its K/V load and the dK/dV reductions, ~2 steps of memory traffic).
struct TailSplit {
  std::int64_t tiles = 0;  // tail tiles, the last ones of the grid; 0: no split
  int pieces = 1;          // pieces per tail tile
};
constexpr int kTailPieceSteps = 2;
constexpr int kTailMaxPieces = 64;
inline TailSplit choose_tail_split(std::int64_t tiles, int num_sms, std::int64_t query_blocks, std::int64_t group_size) {
  TailSplit best;
  const std::int64_t sms = num_sms;
  if (tiles <= 0 || sms <= 0 || query_blocks < 2 || tiles % sms == 0 || tiles > (std::int64_t{1} << 30)) return best;
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t steps = query_blocks * group_size;
  const std::int64_t unsplit = ceil_div(tiles, sms) * steps;
  std::int64_t best_time = unsplit;
  // Tail = the partial last wave, or it and the full wave before it.
  for (std::int64_t tail = tiles % sms; tail <= tiles && tail < 2 * sms; tail += sms) {
    const std::int64_t full = (tiles - tail) / sms * steps;
    const std::int64_t max_pieces = std::min<std::int64_t>(query_blocks, kTailMaxPieces);
    for (std::int64_t pieces = 2; pieces <= max_pieces; ++pieces) {
      const std::int64_t piece = ceil_div(query_blocks, pieces) * group_size + kTailPieceSteps;
      const std::int64_t time = full + ceil_div(tail * pieces, sms) * piece;
      if (time < best_time) {
        best_time = time;
        best.tiles = tail;
        best.pieces = static_cast<int>(pieces);
      }
    }
  }
  if (best_time * 100 > unsplit * 99) return TailSplit{};  // under 1%: not worth the scratch
  return best;
}

struct BackwardPlan {
  ForwardPath path = ForwardPath::sm80;  // the per-architecture kernel
  BackwardBlocks blocks{};
  bool small_blocks = false;  // the small-shared-memory configuration (backward_blocks_small)
  int num_splits = 1;  // deterministic mode: CTAs per (batch, kv head), each with a dQ buffer
  bool tile_grid = false;  // plan_tile_grid: the unmasked kernel on a 1-D grid of tiles
  TailSplit tail{};        // plan_tile_grid
  std::int64_t tiles = 0;  // key blocks x KV heads x batch (set with tile_grid)
  std::size_t d_sum_bytes = 0;
  std::size_t dq_accum_bytes = 0;
  std::size_t tail_bytes = 0;  // tail split: fp32 dK/dV partial sums, then one counter per tail tile
  std::size_t tail_partials_bytes = 0;  // the partial sums' part of tail_bytes (the counters follow)
  std::size_t workspace_bytes = 0;
  // sm90 backward plans (flash_bwd_sm90/plan.hpp: plan_backward_sm90); the blocks above hold
  // its tiles (warps = threads / 32, the warp-layout fields unused).
  int sm90_dq = 0;          // Sm90DqReduction: 0 atomic, 1 bulk reduce-add, 2 atomic_tiles
  int sm90_tile_order = 0;  // Sm90TileOrder
  int sm90_tile_group = 0;  // its longest-first orders in groups of this many (batch, KV head) pairs; 0: one group
  int sm90_warpgroup_split = 0;  // Sm90BwdWarpgroupSplit: 0 keys, 1 columns (d = 256)
  std::size_t sm90_semaphore_bytes = 0;  // deterministic: per (batch, head, query block), after dq_accum
  // Non-empty when the device's path is sm90 but the call runs the sm80 backward: why.
  std::string sm90_declined;
};

// total_q: batch * seqlen_q (padded) or total tokens (varlen). In deterministic mode the
// n_blocks key blocks of a (batch, kv head) are split over enough CTAs to fill the SMs once;
// each split sums its blocks' dQ in a fixed order into its own buffer and the convert kernel
// adds the buffers in split order, so the result does not depend on scheduling.
// path: the per-architecture kernel (forward_path.hpp); sm75 and sm70 take their own blocks.
inline BackwardPlan plan_backward(int head_dim, std::int64_t batch, std::int64_t num_heads,
                                  std::int64_t num_kv_heads, std::int64_t seqlen_k, std::int64_t total_q,
                                  bool deterministic, int num_sms, int smem_per_block = 0,
                                  ForwardPath path = ForwardPath::sm80) {
  BackwardPlan plan;
  plan.path = path;
  plan.blocks = path == ForwardPath::sm75   ? backward_blocks_sm75(head_dim)
                : path == ForwardPath::sm70 ? backward_blocks_sm70(head_dim)
                                            : choose_backward_blocks(head_dim, smem_per_block, &plan.small_blocks);
  if (deterministic) {
    const std::int64_t n_blocks = (seqlen_k + plan.blocks.block_n - 1) / plan.blocks.block_n;
    const std::int64_t ctas = std::max<std::int64_t>(1, batch * num_kv_heads);
    const std::int64_t fill = (std::max(num_sms, 1) + ctas - 1) / ctas;
    plan.num_splits = static_cast<int>(std::max<std::int64_t>(1, std::min(n_blocks, fill)));
  }
  plan.d_sum_bytes = scratch_align(static_cast<std::size_t>(num_heads * total_q) * sizeof(float));
  plan.dq_accum_bytes = scratch_align(static_cast<std::size_t>(plan.num_splits) *
                                      static_cast<std::size_t>(total_q * num_heads * head_dim) * sizeof(float));
  plan.workspace_bytes = plan.d_sum_bytes + plan.dq_accum_bytes;
  return plan;
}

// FASTATTN_CUDA_BWD_TAIL_SPLIT=0 turns the tail split off (A/B timing, debugging); unset or 1: on.
inline bool tail_split_enabled() { return env_switch(EnvVar::cuda_bwd_tail_split, "1", "0", true); }

// Calls whose tiles all do the same work — padded batches (varlen tiles differ by their
// sequences), no causal or window mask, atomic dQ (deterministic mode has its own grid) — run
// the tile-grid kernel: a 1-D grid over (key block, KV head, batch) tiles with no mask code
// (kernel.cuh, kTileGrid), and with the tail split where choose_tail_split finds a gain. The
// scratch grows by the tail tiles' fp32 dK and dV and their counters, zeroed with the dQ
// accumulator.
inline void plan_tile_grid(BackwardPlan& plan, int head_dim, std::int64_t batch, std::int64_t num_kv_heads,
                           std::int64_t group_size, std::int64_t seqlen_q, std::int64_t seqlen_k, int num_sms) {
  const std::int64_t n_blocks = (seqlen_k + plan.blocks.block_n - 1) / plan.blocks.block_n;
  const std::int64_t query_blocks = (seqlen_q + plan.blocks.block_m - 1) / plan.blocks.block_m;
  plan.tiles = n_blocks * num_kv_heads * batch;
  if (plan.tiles <= 0 || plan.tiles > std::int64_t{1} << 30) {  // gridDim.x is at most 2^31 - 1
    plan.tiles = 0;
    return;
  }
  plan.tile_grid = true;
  if (!tail_split_enabled()) return;
  plan.tail = choose_tail_split(plan.tiles, num_sms, query_blocks, group_size);
  if (plan.tail.tiles == 0) return;
  plan.tail_partials_bytes = static_cast<std::size_t>(plan.tail.tiles) * 2 * plan.blocks.block_n * head_dim * sizeof(float);
  plan.tail_bytes = scratch_align(plan.tail_partials_bytes + static_cast<std::size_t>(plan.tail.tiles) * sizeof(unsigned));
  plan.workspace_bytes += plan.tail_bytes;
}

}  // namespace fastattn::cuda
