// cuda_forward_plan_test.cpp — the CUDA forward's launch plan (src/cuda/flash_fwd/heuristics.hpp:
// kernel choice, split-KV count, the KV-cache kernel route, the Volta / Turing paths' plans) and
// the GQA decode rewrite (src/cuda/flash_fwd/query_groups.hpp: query heads packed as rows).
// Host-only arithmetic, so it runs in CPU CI (label `cpu`). The backward's tiles are checked in
// cuda_backward_plan_test.cpp, the forward path's choice in cuda_forward_path_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/flash_fwd/query_groups.hpp"
#include "cuda/forward_path.hpp"
#include "cuda_forward_shapes.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using cuda::ForwardPath;
using cuda::ForwardPlan;
using cuda::ForwardShape;

class CudaHeuristics : public ::testing::Test {
 protected:
  ScopedEnv no_forced_splits_{cuda::kNumSplitsEnv, std::nullopt};
};

TEST_F(CudaHeuristics, DecodeOnFewHeadsSplitsTheKeys) {
  for (std::int64_t seqlen_q : {1, 7, 16}) {
    const ForwardShape s = h200_shape(1, 32, seqlen_q, 65536);
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
  const ForwardPlan decode = cuda::plan_forward(h200_shape(64, 32, 1, 65536));  // 2048 CTAs
  EXPECT_TRUE(decode.short_query);
  EXPECT_EQ(decode.num_splits, 1);
  EXPECT_EQ(decode.workspace_bytes, 0u);
  const ForwardPlan prefill = cuda::plan_forward(h200_shape(2, 16, 8192, 8192));
  EXPECT_FALSE(prefill.short_query);
  EXPECT_EQ(prefill.blocks.block_m, 128);
  EXPECT_EQ(prefill.num_splits, 1);
  EXPECT_EQ(prefill.workspace_bytes, 0u);
}

TEST_F(CudaHeuristics, LongKeysWithFewQueryBlocksSplitInTheMainKernel) {
  const ForwardPlan plan = cuda::plan_forward(h200_shape(1, 8, 512, 65536));  // 32 CTAs of 128 rows
  EXPECT_FALSE(plan.short_query);
  EXPECT_GT(plan.num_splits, 1);
  EXPECT_GT(plan.workspace_bytes, 0u);
}

TEST_F(CudaHeuristics, ShortKeysKeepAFewTilesPerSplit) {
  EXPECT_EQ(cuda::plan_forward(h200_shape(1, 1, 1, 200)).num_splits, 1);  // 4 tiles of 64 keys
  const ForwardPlan plan = cuda::plan_forward(h200_shape(1, 1, 1, 2048));  // 32 tiles
  EXPECT_LE(plan.num_splits, 32 / cuda::kMinTilesPerSplit);
  // A two-sided window bounds the keys a query block sees, whatever seqlen_k is.
  ForwardShape windowed = h200_shape(1, 1, 1, 1 << 20);
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
  ForwardPlan plan = cuda::plan_forward(h200_shape(1, 32, 1, 65536));
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
    ForwardShape s = h200_shape(1, 8, 4 * tokens, 65536);  // GQA 4: 4 * tokens packed rows
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
  ForwardShape longer = h200_shape(1, 8, 17, 4096);
  longer.query_tokens = 17;
  EXPECT_EQ(cuda::plan_forward(longer).kernel, cuda::ForwardKernel::flash);
  ForwardShape varlen = h200_shape(2, 8, 1, 4096);
  varlen.query_tokens = 1;
  varlen.varlen = true;
  EXPECT_EQ(cuda::plan_forward(varlen).kernel, cuda::ForwardKernel::flash);
  ForwardShape turing = h200_shape(2, 8, 1, 4096);
  turing.query_tokens = 1;
  turing.path = cuda::ForwardPath::sm75;
  EXPECT_EQ(cuda::plan_forward(turing).kernel, cuda::ForwardKernel::flash);
  ForwardShape unfit = h200_shape(1, 32, 1, 65536, 256);
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
    const ForwardPlan plan = cuda::plan_forward(h200_shape(64, 32, 1, 100));
    EXPECT_TRUE(plan.forced);
    EXPECT_EQ(plan.num_splits, 7);
    EXPECT_NE(cuda::describe_plan(plan).find("FASTATTN_CUDA_NUM_SPLITS"), std::string::npos);
  }
  {
    ScopedEnv forced(cuda::kNumSplitsEnv, "1");
    EXPECT_EQ(cuda::plan_forward(h200_shape(1, 32, 1, 65536)).num_splits, 1);
  }
  for (const char* bad : {"0", "129", "two", "3x"}) {
    ScopedEnv forced(cuda::kNumSplitsEnv, bad);
    expect_error([] { cuda::plan_forward(h200_shape(1, 1, 1, 64)); }, ErrorCode::invalid_argument,
                 "FASTATTN_CUDA_NUM_SPLITS");
  }
  EXPECT_FALSE(cuda::plan_forward(h200_shape(1, 32, 1, 65536)).forced);
}

// The Volta / Turing plans: the main kernel only (no cp.async ring for short queries), the
// path's blocks, CTAs per SM from its shared memory, and the path named in the reason.
TEST_F(CudaHeuristics, LowResPathsPlanTheirOwnKernel) {
  for (ForwardPath p : {ForwardPath::sm75, ForwardPath::sm70}) {
    for (std::int64_t d : {64, 128}) {
      for (std::int64_t seqlen_q : {1, 16, 4096}) {
        ForwardShape s = h200_shape(2, 8, seqlen_q, 4096, d);
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
  ForwardShape s = h200_shape(1, 8, 4, 65536);
  s.query_group = 4;
  const ForwardPlan plan = cuda::plan_forward(s);
  EXPECT_TRUE(plan.short_query);
  EXPECT_NE(cuda::describe_plan(plan).find("the 4 query heads of each KV head packed as query rows"),
            std::string::npos)
      << cuda::describe_plan(plan);
}

}  // namespace
}  // namespace fastattn::testing
