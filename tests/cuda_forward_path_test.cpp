// cuda_forward_path_test.cpp — the CUDA forward path (src/cuda/forward_path.hpp): chosen by the
// compute capability or forced by FASTATTN_CUDA_PATH, what each path serves, its tiles' shared
// memory, the Hopper path's plan and the calls it declines, and which CMake architecture lists
// run on a device. Host-only arithmetic, so it runs in CPU CI (label `cpu`).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"
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
// A padded call on an H200-like device (132 SMs) on the sm90 path.
cuda::ForwardShape hopper_shape(std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t sk, std::int64_t d) {
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
}

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

// The epilogue's TMA store (plan.hpp: sm90_tma_store, sm90_output_tile_fits) and the persistent
// order's sections (Sm90Sections): the defaults, what forces them, and bad values.
TEST(CudaForwardPath, Sm90EpilogueAndSections) {
  // sO fits beside Q and the ring at d 64 / 96 / 128, not at d 256 nor with the wide key tile.
  for (const int d : {64, 96, 128}) EXPECT_TRUE(cuda::sm90_output_tile_fits(cuda::sm90_forward_blocks(d), d)) << d;
  EXPECT_FALSE(cuda::sm90_output_tile_fits(cuda::sm90_forward_blocks(256), 256));
  EXPECT_FALSE(cuda::sm90_output_tile_fits(cuda::sm90_forward_blocks(128, cuda::kSm90WideBlockN), 128));
  for (const int d : {64, 96, 128, 256}) {
    EXPECT_LE(cuda::sm90_forward_smem_bytes(cuda::sm90_forward_blocks(d), d), cuda::kSm90SmemLimit) << d;
  }
  const cuda::ForwardShape plain = hopper_shape(32, 16, 512, 512, 128);
  cuda::ForwardShape causal = plain, window = plain, varlen = plain, strided_out = plain;
  causal.window_right = 0;
  window.window_left = 64;
  window.window_right = 64;
  varlen.varlen = true;
  varlen.total_k = 32 * 512;
  strided_out.out_tma_describes = false;
  ASSERT_EQ(cuda::plan_forward(varlen).path, ForwardPath::sm90) << cuda::plan_forward(varlen).sm90_declined;
  EXPECT_TRUE(cuda::plan_forward(plain).sm90_tma_store);
  EXPECT_TRUE(cuda::plan_forward(causal).sm90_tma_store);
  EXPECT_FALSE(cuda::plan_forward(varlen).sm90_tma_store);  // a box would write the next sequence's rows
  EXPECT_FALSE(cuda::plan_forward(strided_out).sm90_tma_store);  // an out TMA cannot describe
  EXPECT_EQ(cuda::plan_forward(strided_out).path, ForwardPath::sm90);  // still sm90, stores from registers
  EXPECT_EQ(cuda::plan_forward(varlen).sm90_sections, cuda::Sm90Sections::l2_half);  // empty tiles past short sequences
  EXPECT_FALSE(cuda::plan_forward(hopper_shape(4, 8, 4096, 4096, 256)).sm90_tma_store);
  EXPECT_FALSE(cuda::plan_forward(hopper_shape(2, 16, 8192, 8192, 128)).sm90_tma_store);  // the wide tile
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(plain)).find("TMA store"), std::string::npos);
  // Sections: one (head, batch) pair without a mask, half the L2 under a causal mask or a window.
  EXPECT_EQ(cuda::plan_forward(plain).sm90_sections, cuda::Sm90Sections::per_pair);
  EXPECT_EQ(cuda::plan_forward(causal).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_EQ(cuda::plan_forward(window).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(plain)).find("query blocks together"), std::string::npos)
      << cuda::describe_plan(cuda::plan_forward(plain));
  EXPECT_NE(cuda::describe_plan(cuda::plan_forward(causal)).find("longest tiles first"), std::string::npos)
      << cuda::describe_plan(cuda::plan_forward(causal));
  {
    ScopedEnv dynamic(cuda::kSm90SchedulerEnv, "dynamic");  // its kernels store from registers
    EXPECT_FALSE(cuda::plan_forward(plain).sm90_tma_store);
  }
  {
    ScopedEnv off(cuda::kSm90TmaStoreEnv, "0");
    EXPECT_FALSE(cuda::plan_forward(plain).sm90_tma_store);
    EXPECT_EQ(cuda::describe_plan(cuda::plan_forward(plain)).find("TMA store"), std::string::npos);
    ScopedEnv bad(cuda::kSm90TmaStoreEnv, "no");
    expect_error([&] { cuda::plan_forward(plain); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_TMA_STORE");
  }
  for (const auto& [text, want] : {std::pair<const char*, cuda::Sm90Sections>{"l2", cuda::Sm90Sections::l2_half},
                                   {"pair", cuda::Sm90Sections::per_pair},
                                   {"wave", cuda::Sm90Sections::wave}}) {
    ScopedEnv forced(cuda::kSm90SectionsEnv, text);
    EXPECT_EQ(cuda::plan_forward(plain).sm90_sections, want) << text;
    EXPECT_EQ(cuda::plan_forward(causal).sm90_sections, want) << text;
  }
  ScopedEnv bad(cuda::kSm90SectionsEnv, "half");
  expect_error([&] { cuda::plan_forward(causal); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_SECTIONS");
}

// The wave sections on the default tiles (plan.hpp: sm90_wave_sections_pay): causal d = 128
// calls without GQA or soft-cap, padded, whose query tiles see on average 8 key tiles or more
// (s2k and up), and the shorter ones on a device of less than kSm90WaveShortMaxGbsPerSm of DRAM
// bandwidth per SM (an H100 80GB HBM3: 3.35 TB/s over 132 SMs), as do causal sliding windows
// there; shorter calls on other devices (an H200: 4.8 TB/s; unknown bandwidth), GQA, soft-cap,
// varlen, other windows, other head dims and calls without a mask keep their sections. Causal
// d = 256 calls of 16 key tiles or more (of 80 keys: s4k, about 2.4k keys and up) take them on
// every device, the shorter ones on none.
TEST(CudaForwardPath, Sm90WaveSectionsRule) {
  auto causal = [](std::int64_t b, std::int64_t h, std::int64_t s, std::int64_t d, std::int64_t group) {
    cuda::ForwardShape shape = hopper_shape(b, h, s, s, d);
    shape.window_right = 0;
    shape.heads_per_kv_head = group;
    return shape;
  };
  for (const std::int64_t s : {2048, 4096, 8192}) {
    const cuda::ForwardPlan p = cuda::plan_forward(causal(16384 / s, 16, s, 128, 1));
    EXPECT_GE(p.sm90_key_tiles, cuda::kSm90WaveMinKeyTiles) << s;
    EXPECT_EQ(p.sm90_sections, cuda::Sm90Sections::wave) << s;
    EXPECT_NE(cuda::describe_plan(p).find("sections of one wave"), std::string::npos) << cuda::describe_plan(p);
  }
  const double h100 = 3352.0 / 132, h200 = 4915.0 / 132;  // GB/s per SM
  for (const std::int64_t s : {512, 1024}) {
    cuda::ForwardShape shape = causal(16384 / s, 16, s, 128, 1);
    EXPECT_LT(cuda::plan_forward(shape).sm90_key_tiles, cuda::kSm90WaveMinKeyTiles) << s;
    EXPECT_EQ(cuda::plan_forward(shape).sm90_sections, cuda::Sm90Sections::l2_half) << s;  // bandwidth unknown
    shape.dram_gbs_per_multiprocessor = h200;
    EXPECT_EQ(cuda::plan_forward(shape).sm90_sections, cuda::Sm90Sections::l2_half) << s;
    shape.dram_gbs_per_multiprocessor = h100;
    EXPECT_EQ(cuda::plan_forward(shape).sm90_sections, cuda::Sm90Sections::wave) << s;
    shape.heads_per_kv_head = 4;  // GQA keeps its sections there too
    EXPECT_EQ(cuda::plan_forward(shape).sm90_sections, cuda::Sm90Sections::l2_half) << s;
    shape.heads_per_kv_head = 1;
    shape.window_right = -1;  // no mask: one pair a section
    EXPECT_EQ(cuda::plan_forward(shape).sm90_sections, cuda::Sm90Sections::per_pair) << s;
  }
  {
    cuda::ForwardShape d64 = causal(32, 32, 512, 64, 1);  // d = 64's narrow tile: wave anyway
    d64.dram_gbs_per_multiprocessor = h200;
    EXPECT_EQ(cuda::plan_forward(d64).sm90_sections, cuda::Sm90Sections::wave);
    cuda::ForwardShape d256 = causal(32, 8, 512, 256, 1);
    d256.dram_gbs_per_multiprocessor = h100;
    EXPECT_EQ(cuda::plan_forward(d256).sm90_sections, cuda::Sm90Sections::l2_half);
    d256 = causal(8, 8, 2048, 256, 1);  // 26 key tiles of 80: 13 on average
    EXPECT_LT(cuda::plan_forward(d256).sm90_key_tiles, cuda::kSm90WaveMinKeyTilesD256);
    EXPECT_EQ(cuda::plan_forward(d256).sm90_sections, cuda::Sm90Sections::l2_half);
  }
  for (const std::int64_t s : {2432, 4096}) {  // 31 and 52 key tiles: 16 and 26 on average
    const cuda::ForwardPlan p = cuda::plan_forward(causal(4, 8, s, 256, 1));
    EXPECT_GE(p.sm90_key_tiles, cuda::kSm90WaveMinKeyTilesD256) << s;
    EXPECT_EQ(p.sm90_sections, cuda::Sm90Sections::wave) << s;
  }
  EXPECT_EQ(cuda::plan_forward(causal(4, 32, 4096, 256, 4)).sm90_sections, cuda::Sm90Sections::l2_half);  // GQA
  EXPECT_EQ(cuda::plan_forward(causal(4, 32, 4096, 128, 4)).sm90_sections, cuda::Sm90Sections::l2_half);  // GQA 32/8
  EXPECT_EQ(cuda::plan_forward(causal(4, 16, 4096, 96, 1)).sm90_sections, cuda::Sm90Sections::l2_half);
  cuda::ForwardShape varlen = causal(4, 16, 4096, 128, 1), band = causal(4, 16, 4096, 128, 1);
  varlen.varlen = true;
  varlen.total_k = 4 * 4096;
  band.window_left = 2048;
  EXPECT_EQ(cuda::plan_forward(varlen).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_EQ(cuda::plan_forward(band).sm90_sections, cuda::Sm90Sections::l2_half);
  // A causal sliding window (2048, 0): wave on the bandwidth-poor device only; a window open on
  // the right, never.
  band.dram_gbs_per_multiprocessor = h200;
  EXPECT_EQ(cuda::plan_forward(band).sm90_sections, cuda::Sm90Sections::l2_half);
  band.dram_gbs_per_multiprocessor = h100;
  EXPECT_EQ(cuda::plan_forward(band).sm90_sections, cuda::Sm90Sections::wave);
  band.window_right = 64;
  EXPECT_EQ(cuda::plan_forward(band).sm90_sections, cuda::Sm90Sections::l2_half);
  varlen.dram_gbs_per_multiprocessor = h100;
  EXPECT_EQ(cuda::plan_forward(varlen).sm90_sections, cuda::Sm90Sections::l2_half);
  cuda::ForwardShape capped = causal(4, 16, 4096, 128, 1), left_only = hopper_shape(4, 16, 4096, 4096, 128);
  capped.softcap = true;
  left_only.window_left = 2048;  // one-sided, but not causal: not what was measured
  EXPECT_EQ(cuda::plan_forward(capped).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_EQ(cuda::plan_forward(left_only).sm90_sections, cuda::Sm90Sections::l2_half);
  capped.dram_gbs_per_multiprocessor = h100;
  left_only.dram_gbs_per_multiprocessor = h100;
  EXPECT_EQ(cuda::plan_forward(capped).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_EQ(cuda::plan_forward(left_only).sm90_sections, cuda::Sm90Sections::l2_half);
  EXPECT_EQ(cuda::plan_forward(hopper_shape(4, 16, 4096, 4096, 128)).sm90_sections, cuda::Sm90Sections::per_pair);
  ScopedEnv forced(cuda::kSm90SectionsEnv, "l2");
  EXPECT_EQ(cuda::plan_forward(causal(4, 16, 4096, 128, 1)).sm90_sections, cuda::Sm90Sections::l2_half);
}

// d = 64's narrow tile (plan.hpp: sm90_d64_narrow_block_m): padded causal calls without a
// soft-cap of at most 16 key tiles by default, 128 x 128 with two consumer warpgroups and the
// overlap, in wave sections; FASTATTN_CUDA_SM90_D64_TILE=128 / 192 forces one (128 also on calls
// without a mask).
TEST(CudaForwardPath, Sm90D64NarrowTile) {
  cuda::ForwardShape causal = hopper_shape(32, 32, 512, 512, 64), plain = causal, capped = causal, varlen = causal;
  causal.window_right = 0;
  capped.window_right = 0;
  capped.softcap = true;
  varlen.window_right = 0;
  varlen.varlen = true;
  varlen.total_k = 32 * 512;
  cuda::ForwardShape s2k = hopper_shape(8, 32, 2048, 2048, 64), s4k = hopper_shape(4, 32, 4096, 4096, 64);
  s2k.window_right = 0;
  s4k.window_right = 0;
  const cuda::ForwardPlan p = cuda::plan_forward(causal);
  EXPECT_EQ(p.blocks.block_m, 128);
  EXPECT_EQ(p.blocks.block_n, 128);
  EXPECT_EQ(p.blocks.threads, 384);
  EXPECT_EQ(p.sm90_block_m, cuda::kSm90D64NarrowBlockM);
  EXPECT_TRUE(p.sm90_overlap);
  EXPECT_TRUE(p.sm90_wg_order);  // persistent at 2 key tiles per query tile: the ordered issue
  EXPECT_EQ(p.sm90_sections, cuda::Sm90Sections::wave);
  EXPECT_NE(cuda::describe_plan(p).find("narrow tile"), std::string::npos) << cuda::describe_plan(p);
  EXPECT_NE(cuda::describe_plan(p).find("sections of one wave"), std::string::npos) << cuda::describe_plan(p);
  EXPECT_LE(cuda::sm90_forward_smem_bytes(cuda::sm90_forward_blocks(64, 0, cuda::kSm90D64NarrowBlockM), 64),
            cuda::kSm90SmemLimit);
  EXPECT_EQ(cuda::plan_forward(s2k).sm90_block_m, cuda::kSm90D64NarrowBlockM);  // 16 key tiles
  EXPECT_EQ(cuda::plan_forward(s4k).sm90_block_m, 0);                           // 32: the 192-row tile
  EXPECT_EQ(cuda::plan_forward(s4k).blocks.block_m, 192);
  EXPECT_EQ(cuda::plan_forward(s4k).sm90_sections, cuda::Sm90Sections::l2_half);
  ASSERT_EQ(cuda::plan_forward(varlen).path, ForwardPath::sm90) << cuda::plan_forward(varlen).sm90_declined;
  for (const cuda::ForwardShape& s : {plain, capped, varlen, hopper_shape(32, 16, 512, 512, 128)}) {
    EXPECT_EQ(cuda::plan_forward(s).path, ForwardPath::sm90);
    EXPECT_EQ(cuda::plan_forward(s).sm90_block_m, 0);
  }
  {
    ScopedEnv dynamic(cuda::kSm90SchedulerEnv, "dynamic");  // no narrow dynamic kernel
    EXPECT_EQ(cuda::plan_forward(causal).sm90_block_m, 0);
  }
  {
    ScopedEnv wide(cuda::kSm90D64TileEnv, "192");
    EXPECT_EQ(cuda::plan_forward(causal).sm90_block_m, 0);
    EXPECT_EQ(cuda::plan_forward(causal).blocks.block_m, 192);
    EXPECT_EQ(cuda::plan_forward(causal).sm90_sections, cuda::Sm90Sections::l2_half);
  }
  {
    ScopedEnv narrow(cuda::kSm90D64TileEnv, "128");
    EXPECT_EQ(cuda::plan_forward(s4k).sm90_block_m, cuda::kSm90D64NarrowBlockM);
    EXPECT_EQ(cuda::plan_forward(plain).sm90_block_m, cuda::kSm90D64NarrowBlockM);  // forced: no mask too
    EXPECT_EQ(cuda::plan_forward(capped).sm90_block_m, 0);
    cuda::ForwardShape two_sided = causal;
    two_sided.window_left = 100;
    EXPECT_EQ(cuda::plan_forward(two_sided).sm90_block_m, 0);
    ScopedEnv sections(cuda::kSm90SectionsEnv, "l2");
    EXPECT_EQ(cuda::plan_forward(s4k).sm90_sections, cuda::Sm90Sections::l2_half);
  }
  ScopedEnv bad(cuda::kSm90D64TileEnv, "64");
  expect_error([&] { cuda::plan_forward(plain); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_D64_TILE");
}

// Two-CTA clusters sharing the K/V loads (plan.hpp: sm90_cluster), compiled only in builds with
// FASTATTN_SM90_KV_MULTICAST=1 and at d = 128: padded calls without a mask or soft-cap on the
// head dim's own tiles, persistent in per-(head, batch) sections with the ordered overlap loop,
// and an even number of query blocks. FASTATTN_CUDA_SM90_CLUSTER=0 turns it off; a bad value
// names the variable whether or not the call could be served.
TEST(CudaForwardPath, Sm90ClusterRule) {
  const cuda::ForwardShape served = hopper_shape(8, 16, 2048, 2048, 128);  // 16 query blocks, 16 key tiles
  cuda::ForwardShape causal = served, capped = served, varlen = served;
  causal.window_right = 0;
  capped.softcap = true;
  varlen.varlen = true;
  varlen.total_k = 8 * 2048;
  const bool compiled = cuda::sm90_cluster_compiled(128);
  const cuda::ForwardPlan p = cuda::plan_forward(served);
  ASSERT_EQ(p.path, ForwardPath::sm90) << p.sm90_declined;
  EXPECT_EQ(p.sm90_cluster, compiled);
  EXPECT_EQ(cuda::describe_plan(p).find("two-CTA clusters") != std::string::npos, compiled) << cuda::describe_plan(p);
  for (const int d : {64, 96, 256}) EXPECT_FALSE(cuda::sm90_cluster_compiled(d)) << d;
  // 15 query blocks; a mask, a soft-cap, varlen; the wide key tile (8k keys); other head dims.
  for (const cuda::ForwardShape& s : {hopper_shape(8, 16, 1920, 1920, 128), causal, capped, varlen,
                                      hopper_shape(2, 16, 8192, 8192, 128), hopper_shape(8, 16, 2048, 2048, 64),
                                      hopper_shape(8, 16, 2048, 2048, 96)}) {
    EXPECT_FALSE(cuda::plan_forward(s).sm90_cluster) << cuda::describe_plan(cuda::plan_forward(s));
  }
  for (const auto& [var, value] : {std::pair{cuda::kSm90SchedulerEnv, "grid"}, std::pair{cuda::kSm90SectionsEnv, "l2"},
                                   std::pair{cuda::kSm90WgOrderEnv, "0"}, std::pair{cuda::kSm90ClusterEnv, "0"}}) {
    const ScopedEnv env(var, value);
    EXPECT_FALSE(cuda::plan_forward(served).sm90_cluster) << var << "=" << value;
  }
  {
    const ScopedEnv on(cuda::kSm90ClusterEnv, "1");
    EXPECT_EQ(cuda::plan_forward(served).sm90_cluster, compiled);
    EXPECT_FALSE(cuda::plan_forward(causal).sm90_cluster);  // "1" serves no more calls than unset
  }
  const ScopedEnv bad(cuda::kSm90ClusterEnv, "2");
  expect_error([&] { cuda::plan_forward(causal); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_CLUSTER");
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
