// kv_cache_heuristics_test.cpp — the CUDA KV-cache kernel's host-side plan
// (src/cuda/inference/kv_cache_heuristics.hpp): row tiles, shared memory, split counts, scratch.
// Plain C++, so every machine checks it (label `cpu`); the kernels themselves are tested in
// gpu_kv_cache_kernel_cases_test.cpp and gpu_kv_cache_kernel_graph_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuda/inference/kv_cache_heuristics.hpp"

namespace fastattn::testing {
namespace {

TEST(KVCacheHeuristics, RowTilesPackTheGroupAndTokens) {
  EXPECT_EQ(cuda::kv_row_tile(1, 128).rows, 16);
  EXPECT_EQ(cuda::kv_row_tile(4, 128).key_warps, 4);
  EXPECT_EQ(cuda::kv_row_tile(32, 128).rows, 32);
  EXPECT_EQ(cuda::kv_row_tile(33, 128).rows, 64);
  EXPECT_EQ(cuda::kv_row_tile(128, 128).m_tiles, 2);
  EXPECT_EQ(cuda::kv_row_tile(4096, 128).rows, 128);
  EXPECT_EQ(cuda::kv_row_tile(128, 256).rows, 64) << "no 128-row tile at d = 256 (registers)";
  for (int d : {64, 96, 128, 256}) {
    for (std::int64_t rows : {1, 17, 33, 65}) {
      const cuda::KVRowTile t = cuda::kv_row_tile(rows, d);
      EXPECT_EQ(t.row_warps * t.key_warps, 4);
      EXPECT_EQ(t.rows, t.row_warps * t.m_tiles * 16);
      EXPECT_EQ(cuda::kv_block_n(d) % (16 * t.key_warps), 0) << "whole k16 steps per key warp";
      EXPECT_LE(cuda::kv_smem_bytes(t, d, cuda::kv_stages(d)), 227 * 1024) << "d " << d << " rows " << t.rows;
      if (t.rows == 16 && cuda::kv_deep_stages(d) > 0) {
        EXPECT_LE(cuda::kv_smem_bytes(t, d, cuda::kv_deep_stages(d)), 227 * 1024) << "deep ring, d " << d;
      }
    }
  }
  // Two decode CTAs per H200 SM (228 KiB): 64 KiB of K/V in flight each.
  for (std::int64_t rows : {1, 17, 33}) {
    const int smem = cuda::kv_smem_bytes(cuda::kv_row_tile(rows, 128), 128, cuda::kv_stages(128)) +
                     cuda::kKVSmemReservedPerCta;
    EXPECT_GE(228 * 1024 / smem, 2) << rows;
  }
}

// The plan's ring on a device of 101,376 bytes of opt-in shared memory per block (sm86, sm89,
// sm120): the 3-stage ring where it fits, the 2-stage one where only that fits, none (forward()
// takes the 16-row decode kernel, the KV-cache API throws unsupported) where neither does.
TEST(KVCacheHeuristics, RingsFitA101376ByteBlock) {
  constexpr int kLimit = 101376;
  auto stages = [](std::int64_t rows, int d) { return cuda::kv_stages_within(cuda::kv_row_tile(rows, d), d, kLimit); };
  EXPECT_EQ(cuda::kv_smem_bytes(cuda::kv_row_tile(1, 128), 128, 3), 102400) << "the regression's tile";
  EXPECT_EQ(stages(1, 64), 3) << "100,352 bytes";
  EXPECT_EQ(stages(32, 64), 2);
  EXPECT_EQ(stages(128, 64), 2);
  EXPECT_EQ(stages(1, 96), 2);
  EXPECT_EQ(stages(1, 128), 2) << "69,632 bytes";
  EXPECT_EQ(stages(64, 128), 2);
  EXPECT_EQ(stages(128, 128), 0) << "102,912 bytes with 2 stages";
  EXPECT_EQ(stages(1, 256), 0) << "139,264 bytes with its 2 stages";
  for (int d : {64, 96, 128, 256}) {
    for (std::int64_t rows : {1, 17, 33, 65}) {
      const cuda::KVRowTile t = cuda::kv_row_tile(rows, d);
      const int s = cuda::kv_stages_within(t, d, kLimit);
      const std::string why = cuda::kv_smem_decline_reason(t, d, kLimit);
      EXPECT_EQ(s == 0, !why.empty()) << "d " << d << " rows " << rows;
      if (s != 0) {
        EXPECT_TRUE(cuda::kv_stages_valid(t, d, s));
        EXPECT_LE(cuda::kv_smem_bytes(t, d, s), kLimit);
      } else {
        EXPECT_NE(why.find("head_dim " + std::to_string(d)), std::string::npos) << why;
        EXPECT_NE(why.find(std::to_string(kLimit)), std::string::npos) << why;
      }
      // An H200 (232,448 bytes) keeps the default ring.
      EXPECT_EQ(cuda::kv_stages_within(t, d, 232448), cuda::kv_stages(d));
    }
  }
}

cuda::KVSplitShape h200_split(std::int64_t batch, std::int64_t kv_heads, std::int64_t keys) {
  cuda::KVSplitShape s;
  s.units = batch * kv_heads;
  s.tiles = (keys + 63) / 64;
  s.multiprocessors = 132;
  s.ctas_per_sm = 1;  // as kv_cache_plan counts
  return s;
}

TEST(KVCacheHeuristics, SplitsFillTheGpuOnceAndNoMore) {
  // b1, 8 KV heads: 16 splits, one CTA per SM (the measured best of 1..64).
  const cuda::KVSplitChoice one = cuda::choose_kv_splits(h200_split(1, 8, 131072));
  EXPECT_EQ(one.splits, 16);
  EXPECT_NE(one.reason.find("key splits"), std::string::npos) << one.reason;
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(1, 8, 4096)).splits, 16);
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(1, 32, 131072)).splits, 4);
  // b16 GQA: 128 CTAs already fill the SMs once.
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(16, 8, 32768)).splits, 1);
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(16, 8, 131072)).splits, 1);
  // Enough CTAs: no split.
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(64, 8, 4096)).splits, 1);
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(16, 32, 4096)).splits, 1);
  // Short caches: at least kKVMinTilesPerSplit tiles per split.
  const cuda::KVSplitChoice short_cache = cuda::choose_kv_splits(h200_split(1, 8, 256));
  EXPECT_LE(short_cache.splits, 2);
  EXPECT_EQ(cuda::choose_kv_splits(h200_split(1, 8, 0)).splits, 1);
  cuda::KVSplitShape forced = h200_split(64, 8, 4096);
  forced.forced = 7;
  EXPECT_EQ(cuda::choose_kv_splits(forced).splits, 7);
}

// A paged cache counts two CTAs per SM where the 16-row tile's launch bounds and the SM's shared
// memory hold two (the measured best for shuffled pages: kv_split_slots_per_sm); a contiguous
// one, one.
TEST(KVCacheHeuristics, PagedCachesCountTwoCtasPerSm) {
  constexpr int kH100 = 233472, kA100 = 167936, kAda = 102400;  // shared memory per SM, bytes
  const cuda::KVRowTile decode = cuda::kv_row_tile(4, 128);
  const int stages = cuda::kv_stages(128);
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 128, stages, false, kH100), 1);
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 128, stages, true, kH100), 2);
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 128, stages, true, kA100), 1) << "one 101 KB CTA per A100 SM";
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 128, cuda::kv_reduced_stages(128), true, kAda), 1);
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 64, stages, true, kH100), 2);
  EXPECT_EQ(cuda::kv_split_slots_per_sm(decode, 128, cuda::kv_deep_stages(128), true, kH100), 1)
      << "the deep ring: one per SM";
  EXPECT_EQ(cuda::kv_split_slots_per_sm(cuda::kv_row_tile(128, 128), 128, stages, true, kH100), 1)
      << "128 rows: one per SM";
  auto paged = [](std::int64_t batch, std::int64_t kv_heads, std::int64_t keys) {
    cuda::KVSplitShape s = h200_split(batch, kv_heads, keys);
    s.ctas_per_sm = 2;
    return cuda::choose_kv_splits(s).splits;
  };
  EXPECT_EQ(paged(1, 8, 131072), 33);  // the forced count measured at 0.1331 ms (page 64)
  EXPECT_EQ(paged(16, 8, 32768), 2);   // 256 CTAs: 0.4910 ms (page 64)
  EXPECT_EQ(paged(64, 8, 4096), 1);    // 512 CTAs: two resident per SM without a split
}

TEST(KVCacheHeuristics, ScratchHoldsEverySplitsPartials) {
  EXPECT_EQ(cuda::kv_scratch_bytes(1, 4, 8, 4, 128), 0u);
  const std::size_t rows = 3u * 2 * 5 * 7;
  EXPECT_EQ(cuda::kv_scratch_bytes(3, 2, 5, 7, 128), cuda::scratch_align(rows * 128 * 4) + cuda::scratch_align(rows * 4));
  // The fused combine's counters, one per (batch, KV head, row block), after the lse partials.
  const std::size_t counters_at = cuda::kv_counter_offset(3, 2, 5, 7, 128);
  EXPECT_EQ(counters_at, cuda::scratch_align(rows * 128 * 4) + cuda::scratch_align(rows * 4));
  EXPECT_EQ(cuda::kv_counter_bytes(2, 5, 4), 2u * 5 * 4 * 4);
  EXPECT_EQ(cuda::kv_scratch_bytes(3, 2, 5, 7, 128, 4), counters_at + cuda::scratch_align(2u * 5 * 4 * 4));
}

TEST(KVCacheHeuristics, SplitsAreMergedInTheAttentionKernel) {
  EXPECT_EQ(cuda::kv_combine_for(1), cuda::KVCombine::none);
  EXPECT_EQ(cuda::kv_combine_for(2), cuda::KVCombine::fused);
  EXPECT_EQ(cuda::kv_combine_for(cuda::kKVMaxSplits), cuda::KVCombine::fused);
}

}  // namespace
}  // namespace fastattn::testing
