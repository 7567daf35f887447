// cuda_backward_plan_test.cpp — the CUDA backward's launch plan (src/cuda/flash_bwd/plan.hpp): the
// tiles chosen by shared memory (default, small, Turing and Volta tiles), FASTATTN_CUDA_BWD_BLOCKS,
// and the tail split that fills the last wave (FASTATTN_CUDA_BWD_TAIL_SPLIT). Host-only
// arithmetic, so it runs in CPU CI (label `cpu`).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/flash_bwd/plan.hpp"
#include "cuda/forward_path.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

// The backward's tile choice by shared memory (src/cuda/flash_bwd/plan.hpp).
namespace backward {

constexpr int kSm90Smem = 227 * 1024;  // H100 / H200 opt-in per block
constexpr int kSm86Smem = 99 * 1024;   // A10, L4, L40, RTX 30/40

TEST(CudaBackwardPlan, DefaultTilesWhereTheyFit) {
  ScopedEnv unset("FASTATTN_CUDA_BWD_BLOCKS", std::nullopt);
  for (int d : {64, 96, 128, 256}) {
    const auto plan = cuda::plan_backward(d, 2, 16, 16, 4096, 8192, false, 132, kSm90Smem);
    EXPECT_FALSE(plan.small_blocks) << "d " << d;
    EXPECT_EQ(plan.blocks.block_m, cuda::backward_blocks(d).block_m) << "d " << d;
    EXPECT_LE(cuda::backward_smem_bytes(plan.blocks, d), kSm90Smem) << "d " << d;
  }
  // Unknown shared memory (0): the default tiles.
  EXPECT_FALSE(cuda::plan_backward(64, 1, 1, 1, 128, 128, false, 0, 0).small_blocks);
}

TEST(CudaBackwardPlan, SmallTilesFit99KiB) {
  ScopedEnv unset("FASTATTN_CUDA_BWD_BLOCKS", std::nullopt);
  for (int d : {64, 96, 128}) {
    EXPECT_GT(cuda::backward_smem_bytes(cuda::backward_blocks(d), d), kSm86Smem) << "d " << d;
    const auto plan = cuda::plan_backward(d, 2, 16, 16, 4096, 8192, true, 84, kSm86Smem);
    EXPECT_TRUE(plan.small_blocks) << "d " << d;
    EXPECT_LE(cuda::backward_smem_bytes(plan.blocks, d), kSm86Smem) << "d " << d;
    // Deterministic splits follow the chosen key block.
    EXPECT_LE(plan.num_splits, (4096 + plan.blocks.block_n - 1) / plan.blocks.block_n);
  }
  // d = 256 has no small configuration: the default one (the launcher's error names the bytes).
  EXPECT_FALSE(cuda::plan_backward(256, 1, 1, 1, 128, 128, false, 0, kSm86Smem).small_blocks);
}

// The Turing path's tiles (plan.hpp: backward_blocks_sm75) fit a T4's 64 KiB per block, and the
// plan takes them for that path whatever the shared-memory figure says.
TEST(CudaBackwardPlan, TuringTilesFit64KiB) {
  for (int d : {64, 96, 128}) {
    ASSERT_TRUE(cuda::has_sm75_backward_blocks(d));
    const cuda::BackwardBlocks b = cuda::backward_blocks_sm75(d);
    EXPECT_LE(cuda::backward_smem_bytes(b, d), 64 * 1024) << "d=" << d;
    EXPECT_EQ(b.stages, 1) << "d=" << d;
    const auto plan = cuda::plan_backward(d, 2, 16, 16, 4096, 8192, false, 40, kSm90Smem, cuda::ForwardPath::sm75);
    EXPECT_EQ(plan.path, cuda::ForwardPath::sm75);
    EXPECT_EQ(plan.blocks.block_m, b.block_m) << "d=" << d;
    EXPECT_EQ(plan.blocks.block_n, b.block_n) << "d=" << d;
    EXPECT_FALSE(plan.small_blocks);
  }
  EXPECT_FALSE(cuda::has_sm75_backward_blocks(256));
}

// The Volta path's tiles (plan.hpp: backward_blocks_sm70): 32-row warp tiles (every warp
// layout's rows a multiple of 32), padded rows, within a V100's 96 KiB per block.
TEST(CudaBackwardPlan, VoltaTilesFit96KiB) {
  for (int d : {64, 96, 128}) {
    ASSERT_TRUE(cuda::has_sm70_backward_blocks(d));
    const cuda::BackwardBlocks b = cuda::backward_blocks_sm70(d);
    EXPECT_LE(cuda::backward_smem_bytes(b, d, true), 96 * 1024) << "d=" << d;
    EXPECT_EQ(b.block_m / b.warps_sdp_m % 32, 0) << "d=" << d;
    EXPECT_EQ(b.block_n / b.warps_kv_n % 32, 0) << "d=" << d;
    EXPECT_EQ(b.block_m / b.warps_dq_m % 32, 0) << "d=" << d;
    const auto plan = cuda::plan_backward(d, 2, 16, 16, 4096, 8192, false, 80, kSm90Smem, cuda::ForwardPath::sm70);
    EXPECT_EQ(plan.path, cuda::ForwardPath::sm70);
    EXPECT_EQ(plan.blocks.block_m, b.block_m) << "d=" << d;
  }
  // d = 128: rows of 17 chunks (272 bytes) for K, V, Q, dO and 9 (144) for P, dS.
  EXPECT_EQ(cuda::backward_smem_bytes(cuda::backward_blocks_sm70(128), 128, true),
            2 * 64 * 272 + 2 * 64 * 272 + 2 * 64 * 144 + 2 * 64 * 4);
  EXPECT_FALSE(cuda::has_sm70_backward_blocks(256));
}

TEST(CudaBackwardPlan, EnvironmentForcesSmallTiles) {
  {
    ScopedEnv small("FASTATTN_CUDA_BWD_BLOCKS", std::string("small"));
    EXPECT_TRUE(cuda::plan_backward(128, 1, 1, 1, 128, 128, false, 0, kSm90Smem).small_blocks);
    EXPECT_FALSE(cuda::plan_backward(256, 1, 1, 1, 128, 128, false, 0, kSm90Smem).small_blocks);
  }
  {
    ScopedEnv bad("FASTATTN_CUDA_BWD_BLOCKS", std::string("tiny"));
    try {
      (void)cuda::plan_backward(128, 1, 1, 1, 128, 128, false, 0, kSm90Smem);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("FASTATTN_CUDA_BWD_BLOCKS"), std::string::npos) << e.what();
    }
  }
}

// Tail split (wave quantization, plan.hpp: choose_tail_split).
TEST(CudaBackwardPlan, TailSplitFillsTheLastWave) {
  // b2 h32 s8k d64 on 132 SMs: 4096 tiles = 31 waves + 4; the 4 are cut into pieces of 2 query
  // blocks (64 / 32), one wave of 128 pieces.
  const cuda::TailSplit d64 = cuda::choose_tail_split(4096, 132, 64, 1);
  EXPECT_EQ(d64.tiles, 4);
  EXPECT_EQ(d64.pieces, 32);
  // b2 h16 s8k d128: 2048 tiles = 15 waves + 68, 128 query blocks each.
  const cuda::TailSplit d128 = cuda::choose_tail_split(2048, 132, 128, 1);
  EXPECT_EQ(d128.tiles % 132, 68);
  EXPECT_GT(d128.pieces, 1);
  // Full waves, one query block, or a gain under 1%: no split.
  EXPECT_EQ(cuda::choose_tail_split(4224, 132, 64, 1).tiles, 0);
  EXPECT_EQ(cuda::choose_tail_split(4097, 132, 1, 1).tiles, 0);
  EXPECT_EQ(cuda::choose_tail_split(0, 132, 64, 1).tiles, 0);
  EXPECT_EQ(cuda::choose_tail_split(132 * 100 + 131, 132, 64, 1).tiles, 0);  // last wave 131 of 132
  // A small grid (64 tiles on 132 SMs) is all tail: two pieces per tile.
  const cuda::TailSplit small = cuda::choose_tail_split(64, 132, 8, 1);
  EXPECT_EQ(small.tiles, 64);
  EXPECT_EQ(small.pieces, 2);
  // Never more pieces than query blocks, nor than kTailMaxPieces.
  for (std::int64_t tiles : {1, 7, 133, 1000, 4097}) {
    for (std::int64_t qb : {2, 3, 17, 1000}) {
      const cuda::TailSplit s = cuda::choose_tail_split(tiles, 132, qb, 4);
      EXPECT_LE(s.pieces, std::min<std::int64_t>(qb, cuda::kTailMaxPieces));
      EXPECT_LE(s.tiles, tiles);
    }
  }
}

TEST(CudaBackwardPlan, TailSplitScratchAndSwitch) {
  ScopedEnv unset("FASTATTN_CUDA_BWD_BLOCKS", std::nullopt);
  {
    ScopedEnv on("FASTATTN_CUDA_BWD_TAIL_SPLIT", std::nullopt);
    cuda::BackwardPlan plan = cuda::plan_backward(64, 2, 32, 32, 8192, 2 * 8192, false, 0, kSm90Smem);
    const std::size_t before = plan.workspace_bytes;
    cuda::plan_tile_grid(plan, 64, 2, 32, 1, 8192, 8192, 132);
    EXPECT_TRUE(plan.tile_grid);
    EXPECT_EQ(plan.tiles, 4096);
    EXPECT_EQ(plan.tail.tiles, 4);
    // fp32 dK and dV of 4 tiles of 128 keys, and 4 counters.
    EXPECT_GE(plan.tail_bytes, std::size_t{4} * 2 * 128 * 64 * 4 + 4 * 4);
    EXPECT_EQ(plan.workspace_bytes, before + plan.tail_bytes);
  }
  {
    ScopedEnv off("FASTATTN_CUDA_BWD_TAIL_SPLIT", std::string("0"));
    cuda::BackwardPlan plan = cuda::plan_backward(64, 2, 32, 32, 8192, 2 * 8192, false, 0, kSm90Smem);
    cuda::plan_tile_grid(plan, 64, 2, 32, 1, 8192, 8192, 132);
    EXPECT_TRUE(plan.tile_grid);  // the unmasked tile-grid kernel, without pieces
    EXPECT_EQ(plan.tiles, 4096);
    EXPECT_EQ(plan.tail.tiles, 0);
    EXPECT_EQ(plan.tail_bytes, 0u);
  }
  {
    ScopedEnv bad("FASTATTN_CUDA_BWD_TAIL_SPLIT", std::string("yes"));
    cuda::BackwardPlan plan = cuda::plan_backward(64, 2, 32, 32, 8192, 2 * 8192, false, 0, kSm90Smem);
    try {
      cuda::plan_tile_grid(plan, 64, 2, 32, 1, 8192, 8192, 132);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("FASTATTN_CUDA_BWD_TAIL_SPLIT"), std::string::npos) << e.what();
    }
  }
}

}  // namespace backward

}  // namespace
}  // namespace fastattn::testing
