// cuda_forward_path_test.cpp — the CUDA forward path (src/cuda/forward_path.hpp): chosen by the
// compute capability or forced by FASTATTN_CUDA_PATH, what each path serves, its tiles' shared
// memory, the Hopper path's plan and the calls it declines, and which CMake architecture lists
// run on a device (the sm90 plan's further rules: cuda_sm90_forward_rules_test.cpp). Host-only
// arithmetic, so it runs in CPU CI (label `cpu`).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"
#include "cuda_forward_shapes.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

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
  const auto hopper = hopper_shape;
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
  // d = 256: the overlap kernels (0 spills since the twelfth session) are the default for
  // masked calls since the thirteenth session's measurement of causal rows, and for calls
  // without a mask since the seventeenth's (plan.hpp: sm90_overlap);
  // FASTATTN_CUDA_SM90_OVERLAP=0 / 1 selects the plain loop / the overlap.
  EXPECT_TRUE(cuda::sm90_overlap_fits(256));
  EXPECT_TRUE(cuda::plan_forward(hopper(2, 16, 4096, 4096, 256)).sm90_overlap);
  {
    ScopedEnv off(cuda::kSm90OverlapEnv, "0");
    EXPECT_FALSE(cuda::plan_forward(hopper(2, 16, 4096, 4096, 256)).sm90_overlap);
  }
  {
    cuda::ForwardShape causal256 = hopper(2, 16, 4096, 4096, 256), window256 = causal256;
    causal256.window_right = 0;
    window256.window_left = 100;
    window256.window_right = 10;
    EXPECT_TRUE(cuda::plan_forward(causal256).sm90_overlap);
    EXPECT_TRUE(cuda::plan_forward(window256).sm90_overlap);
    ScopedEnv off(cuda::kSm90OverlapEnv, "0");
    EXPECT_FALSE(cuda::plan_forward(causal256).sm90_overlap);
  }
  {
    ScopedEnv on(cuda::kSm90OverlapEnv, "1");
    const cuda::ForwardPlan p256 = cuda::plan_forward(hopper(2, 16, 4096, 4096, 256));
    EXPECT_TRUE(p256.sm90_overlap);
    EXPECT_NE(cuda::describe_plan(p256).find("softmax overlapped"), std::string::npos) << cuda::describe_plan(p256);
  }
  // The scheduler (plan.hpp: sm90_persistent_max_key_tiles): the overlap kernels persistent at
  // every length without a mask and up to 32 key tiles per query tile on average with one; the
  // plain loop up to 64 without a mask, 4 with a causal one; grid above, unless
  // FASTATTN_CUDA_SM90_SCHEDULER says (grid, persistent or dynamic); a bad value names the
  // variable. d = 128 at 8k keys takes the wide key tile: 47 tiles of 176.
  EXPECT_EQ(plan.blocks.block_n, cuda::kSm90WideBlockN);
  EXPECT_EQ(plan.sm90_key_tiles, 47);
  EXPECT_EQ(plan.sm90_scheduler, cuda::Sm90Scheduler::persistent);
  EXPECT_TRUE(plan.sm90_wg_order);
  EXPECT_EQ(plan.sm90_sections, cuda::Sm90Sections::per_pair);
  EXPECT_NE(cuda::describe_plan(plan).find("persistent CTAs"), std::string::npos) << cuda::describe_plan(plan);
  EXPECT_EQ(cuda::plan_forward(hopper(1, 16, 32768, 32768, 128)).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  EXPECT_EQ(cuda::plan_forward(hopper(1, 16, 16384, 16384, 256)).sm90_scheduler,
            cuda::Sm90Scheduler::persistent);  // the overlap loop without a mask
  {
    ScopedEnv plain(cuda::kSm90OverlapEnv, "0");
    EXPECT_EQ(cuda::plan_forward(hopper(1, 16, 16384, 16384, 256)).sm90_scheduler,
              cuda::Sm90Scheduler::grid);  // no mask: the plain loop, 205 key tiles of 80
  }
  EXPECT_NE(cuda::describe_plan(plan).find("128x176 tiles"), std::string::npos) << cuda::describe_plan(plan);
  cuda::ForwardShape causal2k = hopper(8, 16, 2048, 2048, 128), plain2k = causal2k;
  causal2k.window_right = 0;
  EXPECT_EQ(cuda::plan_forward(causal2k).sm90_key_tiles, 8);
  EXPECT_EQ(cuda::plan_forward(causal2k).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  EXPECT_TRUE(cuda::plan_forward(causal2k).sm90_wg_order);  // ordered issue under persistent
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(causal2k)).find("persistent CTAs"), std::string::npos);
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(causal2k)).find("alternating their GEMM issue"), std::string::npos);
  EXPECT_EQ(cuda::plan_forward(plain2k).sm90_scheduler, cuda::Sm90Scheduler::persistent);  // 16 key tiles
  EXPECT_EQ(cuda::plan_forward(plain2k).blocks.block_n, 128);  // the wide tile does not pay at 2k keys
  EXPECT_EQ(cuda::plan_forward(hopper(16, 16, 1024, 1024, 128)).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  cuda::ForwardShape causal16k = hopper(1, 16, 16384, 16384, 128);
  causal16k.window_right = 0;
  EXPECT_EQ(cuda::plan_forward(causal16k).sm90_key_tiles, 64);
  EXPECT_EQ(cuda::plan_forward(causal16k).sm90_scheduler, cuda::Sm90Scheduler::grid);
  EXPECT_EQ(cuda::plan_forward(causal16k).blocks.block_n, 128);  // masked: never the wide tile
  EXPECT_FALSE(cuda::plan_forward(causal16k).sm90_wg_order);
  // The plain loop (d = 64's 192-row tile): persistent up to 64 key tiles without a mask, 4 with
  // a causal one (causal calls of up to 16 key tiles take the narrow tile: Sm90D64NarrowTile).
  cuda::ForwardShape causal64 = hopper(4, 32, 4096, 4096, 64), plain64 = causal64;
  causal64.window_right = 0;
  EXPECT_EQ(cuda::plan_forward(plain64).sm90_scheduler, cuda::Sm90Scheduler::persistent);
  EXPECT_EQ(cuda::plan_forward(causal64).sm90_scheduler, cuda::Sm90Scheduler::grid);
  EXPECT_FALSE(cuda::plan_forward(plain64).sm90_wg_order);  // no overlap kernel at d = 64
  // The wide key tile: where the cost model says it pays (plan.hpp: sm90_wide_tile_pays), at
  // d = 128 only, never with a soft-cap, varlen or a mask; FASTATTN_CUDA_SM90_BLOCK_N forces.
  EXPECT_FALSE(cuda::sm90_wide_tile_pays(2048));
  EXPECT_FALSE(cuda::sm90_wide_tile_pays(4096));  // 24 x 176 = 4224 keys
  EXPECT_FALSE(cuda::sm90_wide_tile_pays(300));   // the model would take it; below 8k it is not measured
  EXPECT_FALSE(cuda::sm90_wide_tile_pays(6144));
  EXPECT_TRUE(cuda::sm90_wide_tile_pays(8192));
  EXPECT_TRUE(cuda::sm90_wide_tile_pays(32768));
  EXPECT_LE(cuda::sm90_forward_smem_bytes(cuda::sm90_forward_blocks(128, cuda::kSm90WideBlockN), 128), 232448);
  {
    cuda::ForwardShape capped = hopper(2, 16, 8192, 8192, 128);
    capped.softcap = true;
    EXPECT_EQ(cuda::plan_forward(capped).blocks.block_n, 128);
    EXPECT_EQ(cuda::sm90_wide_block_n(128, 8192, /*masked=*/false, /*varlen=*/true, /*softcap=*/false), 0);
    EXPECT_EQ(cuda::sm90_wide_block_n(128, 8192, false, false, false), cuda::kSm90WideBlockN);
    EXPECT_EQ(cuda::plan_forward(hopper(2, 16, 8192, 8192, 64)).blocks.block_n, 128);
    ScopedEnv narrow(cuda::kSm90BlockNEnv, "128");
    EXPECT_EQ(cuda::plan_forward(hopper(2, 16, 8192, 8192, 128)).blocks.block_n, 128);
    ScopedEnv wide(cuda::kSm90BlockNEnv, "176");
    EXPECT_EQ(cuda::plan_forward(plain2k).blocks.block_n, cuda::kSm90WideBlockN);
    EXPECT_EQ(cuda::plan_forward(causal2k).blocks.block_n, 128);
    EXPECT_EQ(cuda::plan_forward(capped).blocks.block_n, 128);
    ScopedEnv bad(cuda::kSm90BlockNEnv, "192");
    expect_error([&] { cuda::plan_forward(plain2k); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_BLOCK_N");
  }
  {
    // The ordered issue: forced on or off; a bad value names the variable.
    ScopedEnv off(cuda::kSm90WgOrderEnv, "0");
    EXPECT_FALSE(cuda::plan_forward(causal2k).sm90_wg_order);
    ScopedEnv on(cuda::kSm90WgOrderEnv, "1");
    EXPECT_TRUE(cuda::plan_forward(causal16k).sm90_wg_order);
    EXPECT_FALSE(cuda::plan_forward(plain64).sm90_wg_order);  // overlap kernels only
    ScopedEnv bad(cuda::kSm90WgOrderEnv, "yes");
    expect_error([&] { cuda::plan_forward(causal2k); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_WG_ORDER");
    // Checked for calls without the overlap kernels too.
    expect_error([&] { cuda::plan_forward(plain64); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_WG_ORDER");
  }
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
                           Decline{hopper(1, 4, 200, 65536, 128), "split-KV"},
                           Decline{hopper(1, 1, 1 << 28, 1 << 28, 64), "positions past the sm90 kernel's 32 bits"}}) {
    const cuda::ForwardPlan p = cuda::plan_forward(c.s);
    EXPECT_EQ(p.path, ForwardPath::sm80) << c.why;
    EXPECT_NE(p.sm90_declined.find(c.why), std::string::npos) << p.sm90_declined;
    EXPECT_NE(cuda::describe_plan(p).find(std::string("on an sm90 device (") + c.why), std::string::npos)
        << cuda::describe_plan(p);
  }
  // Just below the 32-bit positions' limit (plan.hpp: kSm90MaxPositions).
  EXPECT_EQ(cuda::plan_forward(hopper(1, 1, (1 << 28) - 1, 1 << 28, 64)).path, ForwardPath::sm90);
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

}  // namespace
}  // namespace fastattn::testing
