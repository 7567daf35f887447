// cuda_sm90_forward_rules_test.cpp — the sm90 forward plan's rules past the path's choice
// (src/cuda/flash_fwd/heuristics.hpp, src/cuda/flash_fwd_sm90/plan.hpp): the TMA-store epilogue,
// the persistent order's sections and the wave sections' rule, d = 64's narrow tile, d = 128's
// short tile, the two-CTA clusters; what the environment forces and its bad values. Split out of
// cuda_forward_path_test.cpp (same suite name, so the filters stay). Host-only arithmetic, so it
// runs in CPU CI (label `cpu`).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"
#include "cuda_forward_shapes.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using cuda::ForwardPath;

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
  // The 128-row tile's rule (a build with d = 128's short tile would run s512 / s1k causal on it).
  const ScopedEnv rows128(cuda::kSm90D128TileEnv, "128");
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

// The d = 128 short tile (plan.hpp: sm90_d128_short_block_m), compiled only in builds with
// FASTATTN_SM90_D128_SHORT_TILE=1: 64 x 64, one consumer warpgroup, two CTAs per SM (their
// shared memory fits an SM), for padded causal calls without a soft-cap of at most 8 key tiles
// of 128; the grid of a persistent plan counts both CTAs of an SM; FASTATTN_CUDA_SM90_D128_TILE
// forces either tile, and a bad value names the variable whether or not the tile is compiled.
TEST(CudaForwardPath, Sm90D128ShortTile) {
  const cuda::Sm90ForwardBlocks b = cuda::sm90_forward_blocks(128, 0, cuda::kSm90D128ShortBlockM);
  EXPECT_EQ(b.block_m, 64);
  EXPECT_EQ(b.block_n, 64);
  EXPECT_EQ(b.threads, 256);
  EXPECT_EQ(cuda::sm90_ctas_per_sm(b), 2);
  EXPECT_EQ(cuda::sm90_ctas_per_sm(cuda::sm90_forward_blocks(128)), 1);
  EXPECT_TRUE(cuda::sm90_output_tile_fits(b, 128));
  EXPECT_LE(2 * (cuda::sm90_forward_smem_bytes(b, 128) + 1024), cuda::kSm90SmemPerSm);
  EXPECT_TRUE(cuda::sm90_overlap_fits(128, cuda::kSm90D128ShortBlockM));
  cuda::ForwardShape s512 = hopper_shape(32, 16, 512, 512, 128), s2k = hopper_shape(8, 16, 2048, 2048, 128);
  s512.window_right = 0;
  s2k.window_right = 0;
  cuda::ForwardShape plain = hopper_shape(32, 16, 512, 512, 128), capped = s512;
  capped.softcap = true;
  if (!cuda::sm90_d128_short_tile_compiled(128)) {
    EXPECT_EQ(cuda::plan_forward(s512).sm90_block_m, 0);
    ScopedEnv forced(cuda::kSm90D128TileEnv, "64");  // not compiled: the 128-row tile
    EXPECT_EQ(cuda::plan_forward(s512).blocks.block_m, 128);
  } else {
    const cuda::ForwardPlan p = cuda::plan_forward(s512);
    EXPECT_EQ(p.sm90_block_m, cuda::kSm90D128ShortBlockM);
    EXPECT_EQ(p.blocks.block_m, 64);
    EXPECT_EQ(p.ctas_per_sm, 2);
    EXPECT_TRUE(p.sm90_overlap);
    EXPECT_FALSE(p.sm90_wg_order);  // one consumer warpgroup
    EXPECT_EQ(p.ctas, 32 * 16 * 8);
    EXPECT_NE(cuda::describe_plan(p).find("short tile"), std::string::npos) << cuda::describe_plan(p);
    EXPECT_NE(cuda::describe_plan(p).find("two per SM, 264"), std::string::npos) << cuda::describe_plan(p);
    EXPECT_EQ(cuda::plan_forward(s2k).sm90_block_m, 0);  // 16 key tiles of 128
    for (const cuda::ForwardShape& s : {plain, capped}) EXPECT_EQ(cuda::plan_forward(s).sm90_block_m, 0);
    {
      ScopedEnv dynamic(cuda::kSm90SchedulerEnv, "dynamic");  // no short dynamic kernel
      EXPECT_EQ(cuda::plan_forward(s512).sm90_block_m, 0);
    }
    {
      ScopedEnv rows128(cuda::kSm90D128TileEnv, "128");
      EXPECT_EQ(cuda::plan_forward(s512).sm90_block_m, 0);
    }
    ScopedEnv forced(cuda::kSm90D128TileEnv, "64");
    EXPECT_EQ(cuda::plan_forward(s2k).sm90_block_m, cuda::kSm90D128ShortBlockM);
    EXPECT_EQ(cuda::plan_forward(plain).sm90_block_m, 0);  // no mask: not served, even forced
  }
  ScopedEnv bad(cuda::kSm90D128TileEnv, "96");
  expect_error([&] { cuda::plan_forward(plain); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_D128_TILE");
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

}  // namespace
}  // namespace fastattn::testing
