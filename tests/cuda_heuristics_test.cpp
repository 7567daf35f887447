// cuda_heuristics_test.cpp — the CUDA launch plans: the forward's (src/cuda/flash_fwd/heuristics.hpp:
// kernel choice and split-KV count) and the backward's tiles (src/cuda/flash_bwd/plan.hpp).
// Host-only arithmetic, so it runs in CPU CI (label `cpu`).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "cuda/flash_bwd/plan.hpp"
#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/flash_fwd/query_groups.hpp"
#include "cuda/forward_path.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using cuda::ForwardPlan;
using cuda::ForwardShape;

// An H100 / H200: 132 SMs, 228 KiB shared memory per SM.
ForwardShape h200(std::int64_t batch, std::int64_t heads, std::int64_t seqlen_q, std::int64_t seqlen_k,
                  std::int64_t head_dim = 128) {
  ForwardShape s;
  s.batch = batch;
  s.num_heads = heads;
  s.head_dim = head_dim;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = seqlen_k;
  s.total_q = batch * seqlen_q;
  s.multiprocessors = 132;
  s.smem_per_multiprocessor = 228 * 1024;
  return s;
}

class CudaHeuristics : public ::testing::Test {
 protected:
  ScopedEnv no_forced_splits_{cuda::kNumSplitsEnv, std::nullopt};
};

TEST_F(CudaHeuristics, DecodeOnFewHeadsSplitsTheKeys) {
  for (std::int64_t seqlen_q : {1, 7, 16}) {
    const ForwardShape s = h200(1, 32, seqlen_q, 65536);
    const ForwardPlan plan = cuda::plan_forward(s);
    EXPECT_TRUE(plan.short_query) << seqlen_q;
    EXPECT_EQ(plan.blocks.block_m, 16);
    EXPECT_EQ(plan.ctas, 32);
    EXPECT_EQ(plan.ctas_per_sm, 3) << "one-warp CTAs of ~69 KiB: three per 228 KiB SM";
    EXPECT_GT(plan.num_splits, 1);
    EXPECT_LE(plan.num_splits, cuda::kMaxSplits);
    EXPECT_GE(plan.n_blocks / plan.num_splits, cuda::kMinTilesPerSplit);
    EXPECT_GE(plan.wave_efficiency, 0.85f);
    // oaccum (splits, heads, total_q, head_dim) f32 + lseaccum (splits, heads, total_q) f32.
    const std::size_t rows = static_cast<std::size_t>(plan.num_splits) * 32 * seqlen_q;
    EXPECT_EQ(plan.workspace_bytes, cuda::scratch_align(rows * 128 * 4) + cuda::scratch_align(rows * 4));
    EXPECT_NE(cuda::describe_plan(plan).find("split-KV"), std::string::npos);
  }
}

TEST_F(CudaHeuristics, ManyCtasDoNotSplit) {
  const ForwardPlan decode = cuda::plan_forward(h200(64, 32, 1, 65536));  // 2048 CTAs
  EXPECT_TRUE(decode.short_query);
  EXPECT_EQ(decode.num_splits, 1);
  EXPECT_EQ(decode.workspace_bytes, 0u);
  const ForwardPlan prefill = cuda::plan_forward(h200(2, 16, 8192, 8192));
  EXPECT_FALSE(prefill.short_query);
  EXPECT_EQ(prefill.blocks.block_m, 128);
  EXPECT_EQ(prefill.num_splits, 1);
  EXPECT_EQ(prefill.workspace_bytes, 0u);
}

TEST_F(CudaHeuristics, LongKeysWithFewQueryBlocksSplitInTheMainKernel) {
  const ForwardPlan plan = cuda::plan_forward(h200(1, 8, 512, 65536));  // 32 CTAs of 128 rows
  EXPECT_FALSE(plan.short_query);
  EXPECT_GT(plan.num_splits, 1);
  EXPECT_GT(plan.workspace_bytes, 0u);
}

TEST_F(CudaHeuristics, ShortKeysKeepAFewTilesPerSplit) {
  EXPECT_EQ(cuda::plan_forward(h200(1, 1, 1, 200)).num_splits, 1);  // 4 tiles of 64 keys
  const ForwardPlan plan = cuda::plan_forward(h200(1, 1, 1, 2048));  // 32 tiles
  EXPECT_LE(plan.num_splits, 32 / cuda::kMinTilesPerSplit);
  // A two-sided window bounds the keys a query block sees, whatever seqlen_k is.
  ForwardShape windowed = h200(1, 1, 1, 1 << 20);
  windowed.window_left = 100;
  windowed.window_right = 0;
  EXPECT_EQ(cuda::plan_forward(windowed).n_blocks, 2);
  EXPECT_EQ(cuda::plan_forward(windowed).num_splits, 1);
}

TEST_F(CudaHeuristics, FlashAttention2WaveEfficiency) {
  // flash-attn 2 on 132 SMs (264 slots), b1 h32 decode at 128-key tiles: the best eligible
  // efficiency is 0.997 (74 splits: 8.97 waves); 7 splits (224 CTAs, 0.848) is the smallest
  // within 85% of it (6 splits: 0.727).
  EXPECT_EQ(cuda::num_splits_heuristic(32, 264, 512, 128), 7);
  EXPECT_EQ(cuda::num_splits_heuristic(300, 264, 512, 128), 1);  // already a wave
  EXPECT_EQ(cuda::num_splits_heuristic(1, 264, 1, 128), 1);      // nothing to split
}

// A decode call whose KV-cache tile fits no ring in the device's shared memory (cuda_backend.cu:
// forward_plan) runs the 16-row decode kernel, and the report says why.
TEST_F(CudaHeuristics, DecodeReportsWhyNotTheKVCacheKernel) {
  ForwardPlan plan = cuda::plan_forward(h200(1, 32, 1, 65536));
  plan.kv_cache_declined = "the KV-cache kernel's 16-row tile at head_dim 256 needs 139264 bytes";
  const std::string r = cuda::describe_plan(plan);
  EXPECT_NE(r.find("not the KV-cache kernel (the KV-cache kernel's 16-row tile at head_dim 256"), std::string::npos) << r;
  EXPECT_NE(r.find("16-query-row kernel"), std::string::npos) << r;
}

// plan_forward routes short padded queries (query_tokens = the call's seqlen_q before GQA
// packing) to the KV-cache kernel as a typed ForwardPlan::kernel; varlen calls, the sm75 path
// and a tile that fits no ring (kv_cache_unfit) keep the flash kernels, the last with its reason.
TEST_F(CudaHeuristics, PlanForwardRoutesShortQueriesToTheKVCacheKernel) {
  for (std::int64_t tokens : {1, 16}) {
    ForwardShape s = h200(1, 8, 4 * tokens, 65536);  // GQA 4: 4 * tokens packed rows
    s.query_group = 4;
    s.query_tokens = tokens;
    const ForwardPlan plan = cuda::plan_forward(s);
    EXPECT_EQ(plan.kernel, cuda::ForwardKernel::kv_cache) << tokens;
    EXPECT_EQ(plan.path, cuda::ForwardPath::sm80);
    EXPECT_TRUE(plan.kv_cache_declined.empty());
    s.path = cuda::ForwardPath::sm90;  // no sm90 decode kernel: the KV-cache kernel, and why
    const ForwardPlan hopper = cuda::plan_forward(s);
    EXPECT_EQ(hopper.kernel, cuda::ForwardKernel::kv_cache);
    EXPECT_EQ(hopper.sm90_declined, "seqlen_q <= 16 runs the KV-cache decode kernel");
  }
  ForwardShape longer = h200(1, 8, 17, 4096);
  longer.query_tokens = 17;
  EXPECT_EQ(cuda::plan_forward(longer).kernel, cuda::ForwardKernel::flash);
  ForwardShape varlen = h200(2, 8, 1, 4096);
  varlen.query_tokens = 1;
  varlen.varlen = true;
  EXPECT_EQ(cuda::plan_forward(varlen).kernel, cuda::ForwardKernel::flash);
  ForwardShape turing = h200(2, 8, 1, 4096);
  turing.query_tokens = 1;
  turing.path = cuda::ForwardPath::sm75;
  EXPECT_EQ(cuda::plan_forward(turing).kernel, cuda::ForwardKernel::flash);
  ForwardShape unfit = h200(1, 32, 1, 65536, 256);
  unfit.query_tokens = 1;
  unfit.kv_cache_unfit = "the KV-cache kernel's 16-row tile at head_dim 256 needs 139264 bytes";
  const ForwardPlan declined = cuda::plan_forward(unfit);
  EXPECT_EQ(declined.kernel, cuda::ForwardKernel::flash);
  EXPECT_TRUE(declined.short_query);
  EXPECT_EQ(declined.kv_cache_declined, unfit.kv_cache_unfit);
  EXPECT_NE(cuda::describe_plan(declined).find("not the KV-cache kernel ("), std::string::npos);
}

TEST_F(CudaHeuristics, EnvironmentForcesTheSplitCount) {
  {
    ScopedEnv forced(cuda::kNumSplitsEnv, "7");
    const ForwardPlan plan = cuda::plan_forward(h200(64, 32, 1, 100));
    EXPECT_TRUE(plan.forced);
    EXPECT_EQ(plan.num_splits, 7);
    EXPECT_NE(cuda::describe_plan(plan).find("FASTATTN_CUDA_NUM_SPLITS"), std::string::npos);
  }
  {
    ScopedEnv forced(cuda::kNumSplitsEnv, "1");
    EXPECT_EQ(cuda::plan_forward(h200(1, 32, 1, 65536)).num_splits, 1);
  }
  for (const char* bad : {"0", "129", "two", "3x"}) {
    ScopedEnv forced(cuda::kNumSplitsEnv, bad);
    expect_error([] { cuda::plan_forward(h200(1, 1, 1, 64)); }, ErrorCode::invalid_argument,
                 "FASTATTN_CUDA_NUM_SPLITS");
  }
  EXPECT_FALSE(cuda::plan_forward(h200(1, 32, 1, 65536)).forced);
}

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

// ---- the forward path (src/cuda/forward_path.hpp): compute capability or FASTATTN_CUDA_PATH ----
namespace path {

using cuda::ForwardPath;
using cuda::ForwardPathRequest;

TEST(CudaForwardPath, ParsesTheVariable) {
  EXPECT_TRUE(cuda::parse_forward_path(nullptr).automatic);
  EXPECT_TRUE(cuda::parse_forward_path("").automatic);
  EXPECT_TRUE(cuda::parse_forward_path("auto").automatic);
  for (const auto& [text, want] : {std::pair<const char*, ForwardPath>{"sm80", ForwardPath::sm80},
                                   {"sm75", ForwardPath::sm75},
                                   {"sm70", ForwardPath::sm70}}) {
    const ForwardPathRequest r = cuda::parse_forward_path(text);
    EXPECT_FALSE(r.automatic) << text;
    EXPECT_EQ(r.path, want) << text;
    EXPECT_STREQ(cuda::to_string(r.path), text);
  }
  for (const char* bad : {"sm86", "SM75", "volta", " sm70", "sm70 ", "7.0"}) {
    expect_error([bad] { cuda::parse_forward_path(bad); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_PATH");
    expect_error([bad] { cuda::parse_forward_path(bad); }, ErrorCode::invalid_argument,
                 std::string("got \"") + bad + "\"");
  }
}

TEST(CudaForwardPath, ReadsTheEnvironmentSnapshot) {
  {
    ScopedEnv env(cuda::kForwardPathEnv, std::string("sm70"));
    EXPECT_EQ(cuda::forward_path_request().path, ForwardPath::sm70);
  }
  {
    ScopedEnv env(cuda::kForwardPathEnv, std::nullopt);
    EXPECT_TRUE(cuda::forward_path_request().automatic);
  }
  ScopedEnv env(cuda::kForwardPathEnv, std::string("turing"));
  expect_error([] { cuda::forward_path_request(); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_PATH");
}

TEST(CudaForwardPath, FollowsTheComputeCapability) {
  const ForwardPathRequest automatic;
  EXPECT_EQ(cuda::select_forward_path(90, automatic), ForwardPath::sm80);  // H100 / H200
  EXPECT_EQ(cuda::select_forward_path(86, automatic), ForwardPath::sm80);
  EXPECT_EQ(cuda::select_forward_path(80, automatic), ForwardPath::sm80);
  EXPECT_EQ(cuda::select_forward_path(75, automatic), ForwardPath::sm75);  // T4, RTX 20xx
  EXPECT_EQ(cuda::select_forward_path(72, automatic), ForwardPath::sm70);  // Xavier
  EXPECT_EQ(cuda::select_forward_path(70, automatic), ForwardPath::sm70);  // V100
  expect_error([&] { cuda::select_forward_path(61, automatic); }, ErrorCode::unsupported, "got 6.1");
}

TEST(CudaForwardPath, ForcesAnOlderPathOnANewerGpu) {
  for (ForwardPath p : {ForwardPath::sm70, ForwardPath::sm75, ForwardPath::sm80}) {
    const ForwardPathRequest forced{false, p};
    EXPECT_EQ(cuda::select_forward_path(90, forced), p);
  }
  // ... but never a newer one on an older GPU.
  const ForwardPathRequest sm80{false, ForwardPath::sm80}, sm75{false, ForwardPath::sm75};
  expect_error([&] { cuda::select_forward_path(75, sm80); }, ErrorCode::unsupported, "FASTATTN_CUDA_PATH=sm80");
  expect_error([&] { cuda::select_forward_path(70, sm75); }, ErrorCode::unsupported, "this GPU has 7.0");
  EXPECT_EQ(cuda::select_forward_path(75, sm75), ForwardPath::sm75);
}

// The Hopper path: automatic on compute capability 9.0 when the build's sm_90a units run there;
// forced by FASTATTN_CUDA_PATH=sm90 only on such a device; the backward maps it to sm80.
TEST(CudaForwardPath, Sm90OnHopperWhenBuilt) {
  const ForwardPathRequest automatic;
  EXPECT_EQ(cuda::select_forward_path(90, automatic, true), ForwardPath::sm90);
  EXPECT_EQ(cuda::select_forward_path(90, automatic, false), ForwardPath::sm80);
  EXPECT_EQ(cuda::select_forward_path(80, automatic, true), ForwardPath::sm80);
  const ForwardPathRequest sm90 = cuda::parse_forward_path("sm90"), sm80 = cuda::parse_forward_path("sm80");
  EXPECT_EQ(sm90.path, ForwardPath::sm90);
  EXPECT_EQ(cuda::select_forward_path(90, sm90, true), ForwardPath::sm90);
  EXPECT_EQ(cuda::select_forward_path(90, sm80, true), ForwardPath::sm80);  // FASTATTN_CUDA_PATH=sm80 on an H200
  expect_error([&] { cuda::select_forward_path(86, sm90, false); }, ErrorCode::unsupported, "FASTATTN_CUDA_PATH=sm90");
  EXPECT_EQ(cuda::backward_path_for(ForwardPath::sm90), ForwardPath::sm80);
  EXPECT_EQ(cuda::backward_path_for(ForwardPath::sm75), ForwardPath::sm75);
}

// sm90 plans, and the calls it hands to the sm80 plan with the reason.
TEST(CudaForwardPath, Sm90PlanAndItsDeclines) {
  auto hopper = [](std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t sk, std::int64_t d) {
    cuda::ForwardShape s;
    s.batch = b;
    s.num_heads = h;
    s.head_dim = d;
    s.seqlen_q = sq;
    s.seqlen_k = sk;
    s.total_q = b * sq;
    s.multiprocessors = 132;
    s.smem_per_multiprocessor = 233472;
    s.path = ForwardPath::sm90;
    return s;
  };
  const cuda::ForwardPlan plan = cuda::plan_forward(hopper(2, 16, 8192, 8192, 128));
  EXPECT_EQ(plan.path, ForwardPath::sm90);
  EXPECT_EQ(plan.blocks.block_m, 128);
  EXPECT_EQ(plan.blocks.threads, 384);
  EXPECT_EQ(plan.num_splits, 1);
  EXPECT_EQ(plan.workspace_bytes, 0u);
  EXPECT_EQ(plan.ctas, 2 * 16 * 64);
  EXPECT_NE(cuda::describe_plan(plan).find("sm90 path (Hopper)"), std::string::npos);
  EXPECT_EQ(cuda::plan_forward(hopper(1, 8, 17, 17, 64)).path, ForwardPath::sm90);
  // Tile shapes per head dim (flash_fwd_sm90/plan.hpp); d = 96 held as 128 columns.
  for (const auto& [d, m, n, threads] : {std::array<int, 4>{64, 192, 128, 512}, std::array<int, 4>{96, 128, 128, 384},
                                         std::array<int, 4>{128, 128, 128, 384}, std::array<int, 4>{256, 128, 80, 384}}) {
    const cuda::ForwardPlan p = cuda::plan_forward(hopper(2, 16, 4096, 4096, d));
    EXPECT_EQ(p.path, ForwardPath::sm90) << d << ": " << p.sm90_declined;
    EXPECT_EQ(p.blocks.block_m, m) << d;
    EXPECT_EQ(p.blocks.block_n, n) << d;
    EXPECT_EQ(p.blocks.threads, threads) << d;
    EXPECT_LE(cuda::sm90_forward_smem_bytes(cuda::sm90_forward_blocks(d), d), 232448) << d;  // sm90 opt-in limit
  }
  EXPECT_EQ(cuda::sm90_tile_head_dim(96), 128);
  EXPECT_TRUE(cuda::sm90_overlap_fits(96));
  EXPECT_FALSE(cuda::sm90_overlap_fits(256));  // it spilled (plan.hpp)
  // The scheduler: persistent for short tiles (<= 12 key tiles per query tile on average), grid
  // for long ones, unless FASTATTN_CUDA_SM90_SCHEDULER says (grid, persistent or dynamic); a bad
  // value names the variable.
  EXPECT_EQ(plan.sm90_key_tiles, 64);
  EXPECT_EQ(plan.sm90_scheduler, cuda::Sm90Scheduler::grid);
  EXPECT_NE(cuda::describe_plan(plan).find("one CTA per tile"), std::string::npos) << cuda::describe_plan(plan);
  cuda::ForwardShape causal2k = hopper(8, 16, 2048, 2048, 128), plain2k = causal2k;
  causal2k.window_right = 0;
  EXPECT_EQ(cuda::plan_forward(causal2k).sm90_key_tiles, 8);
  EXPECT_EQ(cuda::plan_forward(causal2k).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(causal2k)).find("persistent CTAs"), std::string::npos);
  EXPECT_EQ(cuda::plan_forward(plain2k).sm90_scheduler, cuda::Sm90Scheduler::grid);
  EXPECT_EQ(cuda::plan_forward(hopper(16, 16, 1024, 1024, 128)).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  {
    ScopedEnv persistent(cuda::kSm90SchedulerEnv, "persistent");
    EXPECT_EQ(cuda::plan_forward(hopper(2, 16, 8192, 8192, 128)).sm90_scheduler, cuda::Sm90Scheduler::persistent);
    ScopedEnv grid(cuda::kSm90SchedulerEnv, "grid");
    EXPECT_EQ(cuda::plan_forward(causal2k).sm90_scheduler, cuda::Sm90Scheduler::grid);
    EXPECT_EQ(cuda::plan_forward(causal2k).workspace_bytes, 0u);
  }
  {
    // dynamic: forced only (never the default rule); its tile counter is the call's workspace.
    ScopedEnv dynamic(cuda::kSm90SchedulerEnv, "dynamic");
    for (const cuda::ForwardShape& s : {causal2k, plain2k, hopper(1, 8, 16384, 16384, 256)}) {
      const cuda::ForwardPlan p = cuda::plan_forward(s);
      EXPECT_EQ(p.path, ForwardPath::sm90) << p.sm90_declined;
      EXPECT_EQ(p.sm90_scheduler, cuda::Sm90Scheduler::dynamic);
      EXPECT_EQ(p.workspace_bytes, cuda::kSm90TileCounterBytes);
      EXPECT_NE(cuda::describe_plan(p).find("taking tiles from an atomic counter"), std::string::npos)
          << cuda::describe_plan(p);
    }
    EXPECT_STREQ(cuda::to_string(cuda::Sm90Scheduler::dynamic), "dynamic");
  }
  EXPECT_EQ(cuda::plan_forward(causal2k).sm90_scheduler, cuda::Sm90Scheduler::persistent);  // unset again
  EXPECT_EQ(cuda::plan_forward(causal2k).workspace_bytes, 0u);
  {
    ScopedEnv bad(cuda::kSm90SchedulerEnv, "lpt");
    expect_error([&] { cuda::plan_forward(hopper(2, 16, 8192, 8192, 128)); }, ErrorCode::invalid_argument,
                 "FASTATTN_CUDA_SM90_SCHEDULER");
    expect_error([&] { cuda::plan_forward(hopper(2, 16, 8192, 8192, 128)); }, ErrorCode::invalid_argument,
                 "expected grid, persistent or dynamic");
  }

  struct Decline {
    cuda::ForwardShape s;
    const char* why;
  };
  cuda::ForwardShape varlen = hopper(4, 8, 1000, 1000, 128), strided = varlen;
  varlen.varlen = true;
  varlen.total_q = 2500;
  varlen.total_k = 3100;
  strided.tma_describes = false;
  // Varlen (kSm90Varlen): sm90 like a padded batch of the longest sequences' tiles, unless it
  // is switched off; with no key tokens at all, or short queries (the 16-row kernel), sm80.
  cuda::ForwardShape varlen_no_keys = varlen, varlen_short = varlen;
  varlen_no_keys.total_k = 0;
  varlen_short.seqlen_q = 16;
  {
    const cuda::ForwardPlan p = cuda::plan_forward(varlen);
    if (cuda::kSm90Varlen) {
      EXPECT_EQ(p.path, ForwardPath::sm90) << p.sm90_declined;
      EXPECT_EQ(p.ctas, 4 * 8 * 8);  // (batch, head, the longest sequence's query blocks)
    } else {
      EXPECT_EQ(p.path, ForwardPath::sm80);
      EXPECT_NE(p.sm90_declined.find("switched off (kSm90Varlen)"), std::string::npos) << p.sm90_declined;
    }
  }
  for (const Decline& c : {Decline{hopper(2, 8, 1000, 1000, 32), "no sm90 kernel for head_dim 32"},
                           Decline{varlen_no_keys, cuda::kSm90Varlen ? "no keys" : "varlen"},
                           Decline{varlen_short, "varlen"},
                           Decline{strided, "a q/k/v layout TMA cannot load"},
                           Decline{hopper(2, 8, 1000, 0, 128), "no keys"},
                           Decline{hopper(1, 32, 1, 65536, 128), "seqlen_q <= 16"},
                           Decline{hopper(1, 4, 200, 65536, 128), "split-KV"}}) {
    const cuda::ForwardPlan p = cuda::plan_forward(c.s);
    EXPECT_EQ(p.path, ForwardPath::sm80) << c.why;
    EXPECT_NE(p.sm90_declined.find(c.why), std::string::npos) << p.sm90_declined;
    EXPECT_NE(cuda::describe_plan(p).find(std::string("on an sm90 device (") + c.why), std::string::npos)
        << cuda::describe_plan(p);
  }
  {  // Splits forced by the environment: the reason names it, not the SM count.
    ScopedEnv forced(cuda::kNumSplitsEnv, "3");
    const cuda::ForwardPlan p = cuda::plan_forward(hopper(2, 16, 8192, 8192, 128));
    EXPECT_EQ(p.path, ForwardPath::sm80);
    EXPECT_NE(p.sm90_declined.find("3 splits forced by FASTATTN_CUDA_NUM_SPLITS"), std::string::npos)
        << p.sm90_declined;
    EXPECT_EQ(p.sm90_declined.find("too few CTAs"), std::string::npos) << p.sm90_declined;
  }
}

// Which CMake architecture lists hold code a device runs (forward_path.hpp: archs_run_on):
// SASS for the same major version and a lower or equal minor, PTX for any newer device.
TEST(CudaForwardPath, ArchitectureListRunsOnDevice) {
  EXPECT_TRUE(cuda::archs_run_on("75", 75));        // T4: sm_75 SASS
  EXPECT_TRUE(cuda::archs_run_on("75", 90));        // compute_75 PTX, JIT-compiled on an H100/H200
  EXPECT_FALSE(cuda::archs_run_on("75-real", 90));  // SASS alone: major 7 != 9
  EXPECT_TRUE(cuda::archs_run_on("75-real", 75));
  EXPECT_TRUE(cuda::archs_run_on("80-real", 86));   // sm_80 SASS runs on sm_86
  EXPECT_FALSE(cuda::archs_run_on("86-real", 80));
  EXPECT_FALSE(cuda::archs_run_on("90", 75));       // the default H200 build on a T4
  EXPECT_FALSE(cuda::archs_run_on("80;90", 70));
  EXPECT_TRUE(cuda::archs_run_on("80;90", 89));     // compute_80 PTX
  EXPECT_FALSE(cuda::archs_run_on("75-virtual", 70));
  EXPECT_TRUE(cuda::archs_run_on("75-virtual", 80));
  EXPECT_TRUE(cuda::archs_run_on("90a", 90));       // arch-specific: that cc only
  EXPECT_FALSE(cuda::archs_run_on("90a", 100));
  EXPECT_FALSE(cuda::archs_run_on("", 90));
  EXPECT_TRUE(cuda::archs_run_on("70;75;80;90", 72));
}

TEST(CudaForwardPath, WhatEachPathServes) {
  for (long long d : {64, 96, 128, 256}) {
    EXPECT_TRUE(cuda::path_supports(ForwardPath::sm80, true, d));
    EXPECT_TRUE(cuda::path_supports(ForwardPath::sm80, false, d));
    EXPECT_FALSE(cuda::path_supports(ForwardPath::sm75, true, d)) << "no bf16 MMA before sm80";
    EXPECT_FALSE(cuda::path_supports(ForwardPath::sm70, true, d));
    EXPECT_TRUE(cuda::path_supports(ForwardPath::sm75, false, d));
    EXPECT_EQ(cuda::path_supports(ForwardPath::sm70, false, d), d <= 128);
  }
}

// The Volta / Turing plans: the main kernel only (no cp.async ring for short queries), the
// path's blocks, CTAs per SM from its shared memory, and the path named in the reason.
TEST_F(CudaHeuristics, LowResPathsPlanTheirOwnKernel) {
  for (ForwardPath p : {ForwardPath::sm75, ForwardPath::sm70}) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t seqlen_q : {1, 16, 4096}) {
        ForwardShape s = h200(2, 8, seqlen_q, 4096, d);
        s.path = p;
        s.path_forced = true;
        const ForwardPlan plan = cuda::plan_forward(s);
        EXPECT_FALSE(plan.short_query);
        EXPECT_EQ(plan.path, p);
        const cuda::ForwardBlocks b = cuda::forward_blocks_for(p, static_cast<int>(d));
        EXPECT_EQ(plan.blocks.block_m, b.block_m);
        EXPECT_EQ(plan.blocks.block_n, b.block_n);
        EXPECT_EQ(plan.ctas_per_sm, 2) << "<= 64 KiB per CTA on a 228 KiB SM, capped by the launch bounds";
        const std::string reason = cuda::describe_plan(plan);
        EXPECT_NE(reason.find(std::string(cuda::to_string(p)) + " path"), std::string::npos) << reason;
        EXPECT_NE(reason.find("forced by FASTATTN_CUDA_PATH"), std::string::npos) << reason;
      }
    }
  }
}

TEST(CudaForwardPath, BlocksFitTheArchitecturesSharedMemory) {
  for (int d : {64, 96, 128, 256}) {
    const cuda::ForwardBlocks t = cuda::forward_blocks_for(ForwardPath::sm75, d);
    EXPECT_LE(cuda::forward_smem_bytes_for(ForwardPath::sm75, t, d), 64 * 1024) << "Turing: 64 KB per SM, d " << d;
    EXPECT_EQ(t.block_m % (t.threads / 32 * 16), 0) << "16-row MMA tiles per warp";
    if (d > 128) continue;
    const cuda::ForwardBlocks v = cuda::forward_blocks_for(ForwardPath::sm70, d);
    EXPECT_LE(cuda::forward_smem_bytes_for(ForwardPath::sm70, v, d), 96 * 1024) << "Volta: 96 KB per SM, d " << d;
    EXPECT_EQ(v.block_m % (v.threads / 32 * 32), 0) << "32-row quad-pair tiles per warp";
  }
  // sm70 rows: an odd number of 16-byte chunks (d = 64: 9, 96: 13, 128: 17).
  EXPECT_EQ(cuda::forward_smem_bytes_for(ForwardPath::sm70, {128, 64, 128}, 64), (128 + 128) * 9 * 16);
  EXPECT_EQ(cuda::forward_smem_bytes_for(ForwardPath::sm70, {128, 32, 128}, 96), (128 + 64) * 13 * 16);
  EXPECT_EQ(cuda::forward_smem_bytes_for(ForwardPath::sm70, {128, 32, 128}, 128), (128 + 64) * 17 * 16);
  // sm80 unchanged.
  EXPECT_EQ(cuda::forward_blocks_for(ForwardPath::sm80, 128).block_n, cuda::forward_blocks(128).block_n);
}

}  // namespace path

// ---- GQA decode: query heads packed as rows (flash_fwd/query_groups.hpp) -------------------

// A bottom-right-aligned decode call: [batch, 1, heads, d] q/out with contiguous rows.
AttentionProblem decode_call(std::int64_t heads, std::int64_t kv_heads, std::int64_t seqlen_k) {
  AttentionProblem p;
  p.batch = 3;
  p.num_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = 128;
  p.seqlen_q = 1;
  p.seqlen_k = seqlen_k;
  p.total_q = p.batch;
  p.q.stride = {heads * 128, heads * 128, 128};
  p.out.stride = p.q.stride;
  p.lse_batch_stride = heads;
  p.lse_head_stride = 1;
  p.lse_token_stride = 1;
  return p;
}

TEST(CudaQueryGroups, CausalDecodePacksTheGroupAsRowsWithTheSameMemory) {
  AttentionProblem p = decode_call(32, 8, 5000);
  p.window_right = 0;  // causal: bottom-right, the one row sees every key
  ASSERT_EQ(cuda::packed_query_group(p), 4);
  const AttentionProblem packed = cuda::with_packed_query_groups(p);
  EXPECT_EQ(packed.num_heads, 8);
  EXPECT_EQ(packed.group_size(), 1);
  EXPECT_EQ(packed.seqlen_q, 4);
  EXPECT_EQ(packed.total_q, 12);
  EXPECT_EQ(packed.window_left, -1);
  EXPECT_EQ(packed.window_right, -1);
  // Query head h = kv * 4 + j is packed row j of KV head kv: same element offsets.
  for (std::int64_t kv = 0; kv < 8; ++kv) {
    for (std::int64_t j = 0; j < 4; ++j) {
      const std::int64_t h = kv * 4 + j;
      EXPECT_EQ(j * packed.q.stride.token + kv * packed.q.stride.head, h * p.q.stride.head);
      EXPECT_EQ(j * packed.out.stride.token + kv * packed.out.stride.head, h * p.out.stride.head);
      EXPECT_EQ(j * packed.lse_token_stride + kv * packed.lse_head_stride, h * p.lse_head_stride);
    }
  }
}

TEST(CudaQueryGroups, CallsWhereTheRowDoesNotSeeEveryKeyStayAsTheyAre) {
  AttentionProblem top_left = decode_call(32, 8, 5000);
  top_left.window_right = 0;
  top_left.alignment = MaskAlignment::top_left;  // the one row sees key 0 only
  EXPECT_EQ(cuda::packed_query_group(top_left), 1);
  AttentionProblem window = decode_call(32, 8, 5000);
  window.window_left = 100;
  window.window_right = 0;
  EXPECT_EQ(cuda::packed_query_group(window), 1);
  window.window_left = 4999;  // as wide as the keys: every key visible again
  EXPECT_EQ(cuda::packed_query_group(window), 4);
  EXPECT_EQ(cuda::packed_query_group(decode_call(32, 32, 5000)), 1);  // MHA: nothing to pack
  AttentionProblem two_rows = decode_call(32, 8, 5000);
  two_rows.seqlen_q = 2;
  EXPECT_EQ(cuda::packed_query_group(two_rows), 1);
  EXPECT_EQ(cuda::packed_query_group(decode_call(32, 8, 0)), 1);  // no keys: out 0, lse -inf as is
}

TEST_F(CudaHeuristics, PackedDecodeSaysSoInItsReason) {
  ForwardShape s = h200(1, 8, 4, 65536);
  s.query_group = 4;
  const ForwardPlan plan = cuda::plan_forward(s);
  EXPECT_TRUE(plan.short_query);
  EXPECT_NE(cuda::describe_plan(plan).find("the 4 query heads of each KV head packed as query rows"),
            std::string::npos)
      << cuda::describe_plan(plan);
}

}  // namespace
}  // namespace fastattn::testing
