// cuda_sm90_backward_layout_test.cpp — the sm90 backward's index math and plan, on the CPU
// (label `cpu`): src/cuda/flash_bwd_sm90/layout.hpp (wgmma fragments, the P^T -> A fragment
// identity, the 128-byte swizzle against the hardware's function, descriptor starts, bank
// conflicts of the dS^T and dQ stores) and plan.hpp (the choice between the sm90 and sm80
// backward and its reasons, switches, scratch); tile_scheduler.hpp's orders, ranges and ranks are
// cuda_sm90_backward_schedule_test.cpp's. The kernel computes its addresses with these
// functions, so a wrong one fails here before it runs on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/sm90/descriptor.hpp"
#include "fastattn/error.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

namespace L = cuda::sm90_layout;

// Every (thread, slice, element) of an m64 x n accumulator is one distinct (row, col).
TEST(CudaSm90BackwardLayout, AccumulatorCoversTheTileOnce) {
  for (int n : {32, 64, 128}) {
    std::vector<int> seen(64 * n, 0);
    for (int t = 0; t < 128; ++t)
      for (int nt = 0; nt < n / 8; ++nt)
        for (int e = 0; e < 4; ++e) {
          const int row = L::acc_row(t, e), col = L::acc_col(t, nt, e);
          ASSERT_TRUE(row >= 0 && row < 64 && col >= 0 && col < n);
          ++seen[row * n + col];
        }
    for (int c : seen) EXPECT_EQ(c, 1) << "n " << n;
  }
}

// The register A fragment is mma.m16n8k16's A layout per warp (rows 16 w.., PTX ISA), and the
// accumulator element packed into a[kp][r] half h sits at exactly that (row, k): P^T and dS^T
// feed the dV and dK wgmma without any data movement.
TEST(CudaSm90BackwardLayout, PackedAccumulatorIsTheAFragment) {
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int kp = 0; kp < 8; ++kp)
      for (int r = 0; r < 4; ++r)
        for (int h = 0; h < 2; ++h) {
          // m16n8k16 A: a0 (g, 2q + h), a1 (g + 8, 2q + h), a2 (g, 2q + 8 + h), a3 (g + 8, 2q + 8 + h).
          EXPECT_EQ(L::afrag_row(t, r), 16 * w + g + (r % 2 == 1 ? 8 : 0));
          EXPECT_EQ(L::afrag_k(t, kp, r, h), 16 * kp + 2 * q + (r >= 2 ? 8 : 0) + h);
          const int nt = L::pack_slice(kp, r), e = L::pack_element(r, h);
          EXPECT_EQ(L::acc_row(t, e), L::afrag_row(t, r));
          EXPECT_EQ(L::acc_col(t, nt, e), L::afrag_k(t, kp, r, h));
        }
  }
}

// sw128_offset is the TMA / wgmma 128-byte swizzle of the panel-major linear offset, and a
// bijection onto the tile's bytes (in 2-byte elements).
TEST(CudaSm90BackwardLayout, SwizzleIsTheHardwareFunction) {
  for (int rows : {64, 128})
    for (int cols : {64, 128}) {
      std::set<std::uint32_t> offsets;
      for (int row = 0; row < rows; ++row)
        for (int col = 0; col < cols; ++col) {
          const std::uint32_t linear = static_cast<std::uint32_t>((col / 64) * rows * 128 + row * 128 + (col % 64) * 2);
          const std::uint32_t off = L::sw128_offset(rows, row, col);
          EXPECT_EQ(off, L::sw128_apply(linear)) << rows << " " << row << " " << col;
          EXPECT_LT(off, static_cast<std::uint32_t>(rows * cols * 2));
          EXPECT_EQ(off % 2, 0u);
          offsets.insert(off);
        }
      EXPECT_EQ(offsets.size(), static_cast<std::size_t>(rows * cols));
    }
}

// A descriptor's start is the unswizzled address of its first element: for K-major operands
// row row0 (a multiple of 8: no XOR), column 16 kk; for MN-major ones k row 16 kk, m/n column
// mn0 (the d = 64 dQ's n32 half starts 64 bytes into the row).
TEST(CudaSm90BackwardLayout, DescriptorStepsStartAtTheirFirstElement) {
  for (int rows : {64, 128})
    for (int row0 = 0; row0 < rows; row0 += 64)
      for (int kk = 0; kk < 8; ++kk) EXPECT_EQ(L::kmajor_step(rows, row0, kk), L::sw128_offset(rows, row0, 16 * kk));
  for (int rows : {64, 128})
    for (int mn0 : {0, 32, 64})
      for (int kk = 0; kk < rows / 16; ++kk) {
        EXPECT_EQ(L::mnmajor_step(rows, mn0, kk), L::sw128_offset(rows, 16 * kk, mn0));
        // Below the swizzle's input bits 7-9: the descriptor's base offset stays 0.
        EXPECT_EQ((L::mnmajor_step(rows, mn0, kk) >> 7) % 8, 0u);
      }
}

// consumer.cuh's store_ds: one stmatrix.x4 per A fragment a[kp][0..3] (matrix q = register
// q). Each element a lane holds lands in the 16-byte row whose address lane 8q + row % 8 gives
// (stmatrix's rule), at its k column; the 8 rows of a matrix use 8 distinct chunk positions
// (no bank conflict); and the two warpgroups fill the dS^T tile once.
TEST(CudaSm90BackwardLayout, DsStmatrixRowsHoldTheFragmentsConflictFree) {
  constexpr int kBlockN = 128, kBlockM = 64;
  std::vector<int> seen(kBlockN * kBlockM, 0);
  for (int wg = 0; wg < 2; ++wg)
    for (int w = 0; w < 4; ++w)
      for (int kp = 0; kp < kBlockM / 16; ++kp) {
        for (int q = 0; q < 4; ++q) {
          std::set<std::uint32_t> chunks;
          for (int i = 0; i < 8; ++i) {
            const int provider = 8 * q + i, tp = 32 * w + provider;
            const std::uint32_t addr = L::sw128_offset(kBlockN, 64 * wg + L::stmatrix_row(tp, provider),
                                                       L::stmatrix_col(kp, provider));
            EXPECT_EQ(addr % 16, 0u);
            chunks.insert(addr / 16 % 8);
          }
          EXPECT_EQ(chunks.size(), 8u);
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int t = 32 * w + lane;
          for (int r = 0; r < 4; ++r) {
            const int row = 64 * wg + L::afrag_row(t, r), k = L::afrag_k(t, kp, r, 0);
            // stmatrix: register r of lane l is (row l / 4, columns 2 (l % 4), +1) of matrix r.
            const int provider = 8 * r + lane / 4, tp = 32 * w + provider;
            EXPECT_EQ(64 * wg + L::stmatrix_row(tp, provider), row);
            const int col0 = L::stmatrix_col(kp, provider);
            EXPECT_EQ(k, col0 + 2 * (lane % 4));
            ++seen[row * kBlockM + k];
            ++seen[row * kBlockM + k + 1];
          }
        }
      }
  for (int c : seen) EXPECT_EQ(c, 1);
}

// The bulk dQ tile (layout.hpp: dq_tile_index): a bijection of a warpgroup's (64 x n) tile onto
// 128 x n / 2 floats, which dq_tile_row / dq_tile_col invert; each warp's float4 stores of one
// n8 slice cover 512 contiguous bytes (no bank conflict); the tile's bytes are
// plan.hpp's sm90_backward_dq_tile_bytes. The convert kernel's float2 scatter into its padded
// row-major shared tile (dq_convert.cuh: one warpgroup tile, rows of kDqN + 8 floats) hits 32
// distinct banks per half-warp.
TEST(CudaSm90BackwardLayout, DqTileOrderIsABijectionWithConflictFreeStores) {
  for (int d : {64, 96, 128}) {
    const int cols = static_cast<int>(cuda::sm90_backward_smem_columns(d)), dq_n = cols / 2;
    EXPECT_EQ(cuda::sm90_backward_dq_tile_bytes(d), 64 * dq_n * 4) << "d " << d;
    std::vector<int> seen(64 * dq_n, 0);
    for (int t = 0; t < 128; ++t)
      for (int nt = 0; nt < dq_n / 8; ++nt)
        for (int e = 0; e < 4; ++e) {
          const int index = L::dq_tile_index(t, nt, e);
          ASSERT_GE(index, 0);
          ASSERT_LT(index, 64 * dq_n);
          EXPECT_EQ(L::dq_tile_row(index), L::acc_row(t, e));
          EXPECT_EQ(L::dq_tile_col(index), L::acc_col(t, nt, e));
          ++seen[L::acc_row(t, e) * dq_n + L::acc_col(t, nt, e)];
        }
    for (int c : seen) EXPECT_EQ(c, 1) << "d " << d;
    for (int w = 0; w < 4; ++w)
      for (int nt = 0; nt < dq_n / 8; ++nt) {
        const int first = L::dq_tile_index(32 * w, nt, 0);
        EXPECT_EQ(first % 128, 0);  // a 512-byte aligned run: four whole wavefronts
        for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(L::dq_tile_index(32 * w + lane, nt, 0), first + 4 * lane);
      }
    const int row_floats = dq_n + 8;  // dq_convert.cuh: one warpgroup tile per CTA, rows of kDqN + 8 floats
    for (int w = 0; w < 4; ++w)
      for (int nt = 0; nt < dq_n / 8; ++nt)
        for (int half = 0; half < 2; ++half)
          for (int half_warp = 0; half_warp < 2; ++half_warp) {
            std::set<int> banks;
            for (int lane = 16 * half_warp; lane < 16 * half_warp + 16; ++lane) {
              const int t = 32 * w + lane;
              const int at = (L::acc_row(t, 0) + 8 * half) * row_floats + L::acc_col(t, nt, 0);
              EXPECT_EQ(at % 2, 0);
              banks.insert(at % 32);
              banks.insert((at + 1) % 32);
            }
            EXPECT_EQ(banks.size(), 32u) << "d " << d << " nt " << nt;
          }
  }
}

// Where a sequence's dQ tiles start (layout.hpp: dq_first_tile_row): padded batches one block
// of whole query blocks per sequence; varlen q_start / 64 + b, which over random lengths (empty
// ones too) never lets a sequence's tiles reach the next one's and stays under dq_tile_rows.
TEST(CudaSm90BackwardLayout, DqTileRowsOfSequencesDoNotOverlap) {
  EXPECT_EQ(L::dq_first_tile_row(false, 3, 0, 1000, 64), 3 * 16);
  EXPECT_EQ(L::dq_tile_rows(false, 4, 4000, 1000, 64), 4 * 16);
  std::mt19937 rng(20261204);
  for (int trial = 0; trial < 2000; ++trial) {
    const int batch = 1 + static_cast<int>(rng() % 9);
    std::vector<std::int64_t> lens(batch), starts(batch + 1, 0);
    for (int b = 0; b < batch; ++b) {
      const int kind = static_cast<int>(rng() % 4);
      lens[b] = kind == 0 ? 0 : kind == 1 ? static_cast<std::int64_t>(rng() % 4) * 64 : static_cast<std::int64_t>(rng() % 700);
      starts[b + 1] = starts[b] + lens[b];
    }
    const std::int64_t total = starts[batch];
    const std::int64_t rows = L::dq_tile_rows(true, batch, total, 0, 64);
    std::int64_t next_free = 0;
    for (int b = 0; b < batch; ++b) {
      const std::int64_t first = L::dq_first_tile_row(true, b, starts[b], 0, 64);
      const std::int64_t blocks = (lens[b] + 63) / 64;
      EXPECT_GE(first, next_free) << "trial " << trial << " b " << b;
      EXPECT_LE(first + blocks, rows) << "trial " << trial << " b " << b;
      next_free = first + blocks;
    }
  }
}

// sm90/descriptor.hpp: a descriptor advanced by an offset equals the one built from the moved
// address, for every 1024-aligned tile base and 16-byte-aligned offset inside the 227 KiB of
// shared memory a block can have, with the leading / stride fields the backward uses (the
// consumer builds one descriptor per operand and advances it per k16 step).
TEST(CudaSm90BackwardLayout, DescriptorAdvanceEqualsABuiltDescriptor) {
  namespace s9 = cuda::sm90;
  constexpr std::uint32_t kSmem = 227 * 1024;
  for (const std::uint32_t leading : {16u, 64u * 128u, 128u * 128u}) {
    std::size_t checked = 0;
    for (std::uint32_t base = 0; base < kSmem; base += 1024) {
      const std::uint64_t d0 = s9::smem_descriptor_sw128(base, leading, 1024);
      for (std::uint32_t off = 0; base + off < kSmem; off += 16) {
        ASSERT_EQ(s9::descriptor_advance(d0, off), s9::smem_descriptor_sw128(base + off, leading, 1024))
            << "base " << base << " offset " << off << " leading " << leading;
        ++checked;
      }
    }
    EXPECT_GT(checked, 1000000u);
  }
  // The k16 steps' offsets of the backward's operands (consumer.cuh), from kk = 0.
  EXPECT_EQ(L::kmajor_step(128, 0, 5), L::kmajor_step(128, 64, 5) - L::kmajor_step(128, 64, 0));
  EXPECT_EQ(L::mnmajor_step(64, 0, 3), L::mnmajor_step(64, 32, 3) - L::mnmajor_step(64, 32, 0));
  EXPECT_EQ(L::mnmajor_step(128, 0, 7), L::mnmajor_step(128, 64, 7) - L::mnmajor_step(128, 64, 0));
}

using cuda::Sm90TileOrder;

cuda::Sm90BackwardShape hopper(std::int64_t head_dim, std::int64_t seqlen = 4096) {
  cuda::Sm90BackwardShape s;
  s.device_path_sm90 = true;
  s.opted_in = true;
  s.head_dim = head_dim;
  s.batch = 2;
  s.num_heads = 16;
  s.num_kv_heads = 16;
  s.seqlen_q = seqlen;
  s.seqlen_k = seqlen;
  return s;
}

TEST(CudaSm90BackwardPlan, ChoiceAndItsReasons) {
  EXPECT_TRUE(cuda::choose_sm90_backward(hopper(128)).sm90);
  EXPECT_TRUE(cuda::choose_sm90_backward(hopper(64)).sm90);
  EXPECT_EQ(cuda::choose_sm90_backward(hopper(256)).sm90, cuda::sm90_backward_has_head_dim(256));
  EXPECT_EQ(cuda::choose_sm90_backward(hopper(96)).sm90, cuda::sm90_backward_has_head_dim(96));
  struct Declined {
    cuda::Sm90BackwardShape shape;
    std::string why;
  };
  std::vector<Declined> cases;
  cases.push_back({hopper(128), "not sm90"});
  cases.back().shape.device_path_sm90 = false;
  cases.push_back({hopper(128), "FASTATTN_CUDA_BWD_SM90=1"});  // off by default (kSm90BackwardDefault)
  cases.back().shape.opted_in = false;
  cases.push_back({hopper(128), "FASTATTN_CUDA_BWD_SM90=0 forces the sm80 backward"});
  cases.back().shape.opted_in = false;
  cases.back().shape.switch_by_env = true;
  cases.push_back({hopper(80), "no sm90 backward for head_dim 80"});
  cases.push_back({hopper(32), "no sm90 backward for head_dim 32"});
  if (cuda::kSm90BackwardVarlen == cuda::Sm90BackwardVarlen::sm80) {
    cases.push_back({hopper(128), "varlen"});
    cases.back().shape.varlen = true;
  } else {
    cuda::Sm90BackwardShape varlen = hopper(128);
    varlen.varlen = true;
    EXPECT_TRUE(cuda::choose_sm90_backward(varlen).sm90);
  }
  cases.push_back({hopper(128), "TMA cannot load"});
  cases.back().shape.tma_describes = false;
  cases.push_back({hopper(128, 0), "empty sequence"});
  for (const Declined& c : cases) {
    const cuda::Sm90BackwardChoice choice = cuda::choose_sm90_backward(c.shape);
    EXPECT_FALSE(choice.sm90) << c.why;
    EXPECT_NE(choice.reason.find(c.why), std::string::npos) << choice.reason;
  }
}

TEST(CudaSm90BackwardPlan, SwitchesAndScratch) {
  {
    const ScopedEnv unset("FASTATTN_CUDA_BWD_SM90", std::nullopt);
    EXPECT_EQ(cuda::sm90_backward_opted_in(), cuda::kSm90BackwardDefault == cuda::Sm90BackwardDefault::sm90);
    EXPECT_FALSE(cuda::sm90_backward_switch().by_env);
  }
  {
    const ScopedEnv on("FASTATTN_CUDA_BWD_SM90", std::string("1"));
    EXPECT_TRUE(cuda::sm90_backward_opted_in());
    EXPECT_TRUE(cuda::sm90_backward_switch().by_env);
  }
  {
    const ScopedEnv off("FASTATTN_CUDA_BWD_SM90", std::string("0"));
    EXPECT_FALSE(cuda::sm90_backward_opted_in());
    EXPECT_TRUE(cuda::sm90_backward_switch().by_env);
  }
  {
    const ScopedEnv bad("FASTATTN_CUDA_BWD_SM90", std::string("yes"));
    expect_error([] { (void)cuda::sm90_backward_opted_in(); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_BWD_SM90");
  }
  {
    const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 4096, 4096}, false).sm90_dq, 1);
  }
  {
    const cuda::Sm90MaskShape causal{-1, 0, true, 4096, 4096};
    const ScopedEnv unset("FASTATTN_CUDA_SM90_BWD_ORDER", std::nullopt);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, false).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::key_block_ascending));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, true).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::key_block_ascending));
    {
      const ScopedEnv spt("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("shortest_first"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, true).sm90_tile_order,
                static_cast<int>(Sm90TileOrder::key_block_descending));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, false).sm90_tile_order,
                static_cast<int>(Sm90TileOrder::key_block_ascending));
    }
    // Right-bounded (causal) non-deterministic calls of more than kSm90GroupedPairs (batch, KV
    // head) pairs, and deterministic calls of any mask, padded or varlen: longest first (ascending
    // key blocks) within groups of that many pairs, however many pairs (GQA counts KV heads);
    // non-deterministic windows and calls without a mask (head-major) and calls of 4 or fewer
    // pairs keep one group.
    ASSERT_EQ(cuda::kSm90GroupedPairs, 4);
    for (int batch : {2, 8}) {
      const cuda::BackwardPlan plan = cuda::plan_backward_sm90(128, batch, 16, 16, causal, false);
      EXPECT_EQ(plan.sm90_tile_order, static_cast<int>(Sm90TileOrder::key_block_ascending));
      EXPECT_EQ(plan.sm90_tile_group, 4);
      EXPECT_NE(cuda::describe_backward_sm90(plan, false).find("within groups of 4"), std::string::npos);
    }
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 32, 8, causal, false).sm90_tile_group, 4);  // 16 KV pairs
    EXPECT_EQ(cuda::plan_backward_sm90(128, 1, 32, 4, causal, false).sm90_tile_group, 0);  // 4 pairs: one group
    EXPECT_EQ(cuda::plan_backward_sm90(128, 1, 5, 5, causal, false).sm90_tile_group, 4);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::key_block_ascending));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true).sm90_tile_group, 4);
    EXPECT_NE(cuda::describe_backward_sm90(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true), true)
                  .find("low key blocks first across heads within groups of 4"),
              std::string::npos);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 1, 32, 4, causal, true).sm90_tile_group, 0);  // 4 pairs: one group
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false, 8 * 4096).sm90_tile_group, 4);  // varlen
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true, 8 * 4096).sm90_tile_group, 4);
    const cuda::Sm90MaskShape sliding{1024, 0, true, 4096, 4096};
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, false).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::key_block_ascending));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, false).sm90_tile_group, 0);
    const cuda::Sm90MaskShape unmasked{-1, -1, true, 4096, 4096};
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, false).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::head_major));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, false).sm90_tile_group, 0);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, true).sm90_tile_group, 4);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, true).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::key_block_ascending));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, true).sm90_tile_group, 4);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, true, 8 * 4096).sm90_tile_group, 4);  // varlen
    EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, false, 8 * 4096).sm90_tile_group, 0);  // head-major
    {
      const ScopedEnv spt("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("shortest_first"));  // non-det: the default
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false).sm90_tile_group, 4);
    }
    {
      const ScopedEnv longest("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("longest_first"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false).sm90_tile_order,
                static_cast<int>(Sm90TileOrder::key_block_ascending));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false).sm90_tile_group, 0);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true).sm90_tile_group, 0);  // deterministic too
    }
    {
      // grouped: the groups for windows too, varlen calls included; still none for unmasked
      // non-deterministic ones (head-major).
      const ScopedEnv grouped("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("grouped"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, false).sm90_tile_group, 4);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true).sm90_tile_group, 4);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, true).sm90_tile_order,
                static_cast<int>(Sm90TileOrder::key_block_ascending));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, true).sm90_tile_group, 4);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true, 8 * 4096).sm90_tile_group, 4);  // varlen
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, false, 8 * 4096).sm90_tile_group, 4);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, unmasked, false).sm90_tile_group, 0);
    }
    {
      const ScopedEnv pairs("FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS", std::string("3"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false).sm90_tile_group, 3);
      EXPECT_EQ(cuda::plan_backward_sm90(128, 1, 2, 2, causal, false).sm90_tile_group, 0);  // 2 pairs: one group
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, true).sm90_tile_group, 3);  // deterministic
      const ScopedEnv grouped("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("grouped"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, sliding, false).sm90_tile_group, 3);
      const ScopedEnv head_major("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("head_major"));
      EXPECT_EQ(cuda::plan_backward_sm90(128, 8, 16, 16, causal, false).sm90_tile_group, 0);
    }
    // Read by every call, so a bad value fails deterministic calls too.
    for (const char* bad_pairs : {"0", "-2", "4x", "4 ", " ", "1099511627776", "99999999999999999999"}) {
      const ScopedEnv pairs("FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS", std::string(bad_pairs));
      expect_error([&] { (void)cuda::plan_backward_sm90(128, 8, 16, 16, causal, false); }, ErrorCode::invalid_argument,
                   "FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS");
      expect_error([&] { (void)cuda::plan_backward_sm90(128, 8, 16, 16, causal, true); }, ErrorCode::invalid_argument,
                   "FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS");
    }
    const ScopedEnv plain("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("head_major"));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, false).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::head_major));
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, true).sm90_tile_order,
              static_cast<int>(Sm90TileOrder::head_major));
    const ScopedEnv bad("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("random"));
    expect_error([&] { (void)cuda::plan_backward_sm90(128, 2, 16, 16, causal, false); }, ErrorCode::invalid_argument,
                 "FASTATTN_CUDA_SM90_BWD_ORDER");
  }
  {
    // Unset: the measured rule (plan.hpp sm90_dq_default), bulk for d = 128 without a mask or
    // causal, atomic_tiles for the rest of d = 64 / 128 (windows), atomic for d = 96 / 256 (not
    // timed).
    const ScopedEnv unset("FASTATTN_CUDA_SM90_BWD_DQ", std::nullopt);
    const cuda::Sm90MaskShape none{-1, -1, true, 1000, 1000}, causal{-1, 0, true, 1000, 1000};
    const auto bulk = static_cast<int>(cuda::Sm90DqReduction::bulk);
    const auto tiles = static_cast<int>(cuda::Sm90DqReduction::atomic_tiles);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, none, false).sm90_dq, bulk);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, none, true).sm90_dq, bulk);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, false).sm90_dq, bulk);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, false, 1000, 1000}, false).sm90_dq,
              bulk);  // causal, top-left
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{-1, 64, true, 1000, 1000}, false).sm90_dq,
              tiles);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{64, 64, true, 1000, 1000}, false).sm90_dq,
              tiles);
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{64, -1, true, 1000, 1000}, false).sm90_dq,
              tiles);
    EXPECT_EQ(cuda::plan_backward_sm90(64, 2, 16, 16, none, false).sm90_dq, tiles);
    EXPECT_EQ(cuda::plan_backward_sm90(64, 2, 16, 16, causal, false).sm90_dq, tiles);
    // Deterministic calls at d = 64 / 128: bulk, whose writer warp waits for the turns (built
    // with FASTATTN_SM90_BWD_DQ_WRITER, the default).
    const int deterministic = cuda::kSm90BwdDqWriter ? bulk : tiles;
    EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, causal, true).sm90_dq, deterministic);
    EXPECT_EQ(cuda::plan_backward_sm90(64, 2, 16, 16, none, true).sm90_dq, deterministic);
    EXPECT_EQ(cuda::plan_backward_sm90(64, 2, 16, 16, causal, true).sm90_dq, deterministic);
    // ... by several writer warps taking steps in turn (FASTATTN_SM90_BWD_DQ_WRITERS), said in
    // the reason; non-deterministic bulk calls have one.
    if (cuda::kSm90BwdDqWriter) {
      const std::string det_why =
          cuda::describe_backward_sm90(cuda::plan_backward_sm90(128, 2, 16, 16, causal, true), true);
      const std::string why = cuda::describe_backward_sm90(cuda::plan_backward_sm90(128, 2, 16, 16, none, false), false);
      EXPECT_EQ(cuda::sm90_dq_writers(false), 1);
      const int writers = cuda::sm90_dq_writers(true);
      EXPECT_NE(det_why.find(writers > 1 ? std::to_string(writers) + " dQ writer warps taking steps in turn"
                                         : std::string("issued by a dQ writer warp")),
                std::string::npos)
          << det_why;
      EXPECT_NE(why.find("issued by a dQ writer warp"), std::string::npos) << why;
    }
    for (int d : {96, 256}) {
      EXPECT_EQ(cuda::plan_backward_sm90(d, 2, 16, 16, none, false).sm90_dq, 0) << d;
      EXPECT_EQ(cuda::plan_backward_sm90(d, 2, 16, 16, causal, false).sm90_dq, 0) << d;
      EXPECT_EQ(cuda::plan_backward_sm90(d, 2, 16, 16, causal, true).sm90_dq, 0) << d;
    }
  }
  {
    const ScopedEnv bad("FASTATTN_CUDA_SM90_BWD_DQ", std::string("tma"));
    expect_error([] { (void)cuda::sm90_dq_reduction(cuda::Sm90DqReduction::atomic); }, ErrorCode::invalid_argument, "FASTATTN_CUDA_SM90_BWD_DQ");
  }
  const ScopedEnv atomic("FASTATTN_CUDA_SM90_BWD_DQ", std::string("atomic"));
  for (int d : {64, 96, 128, 256}) {
    const cuda::BackwardPlan plain =
        cuda::plan_backward_sm90(d, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 1000, 1000}, false);
    EXPECT_EQ(plain.path, cuda::ForwardPath::sm90);
    EXPECT_EQ(plain.sm90_dq, 0);
    EXPECT_EQ(plain.num_splits, 1);
    EXPECT_EQ(plain.sm90_semaphore_bytes, 0u);
    EXPECT_GE(plain.dq_accum_bytes, static_cast<std::size_t>(2 * 1000 * 16 * d * 4));
    EXPECT_EQ(plain.workspace_bytes, plain.d_sum_bytes + plain.dq_accum_bytes);
    const cuda::BackwardPlan det =
        cuda::plan_backward_sm90(d, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 1000, 1000}, true);
    EXPECT_GE(det.sm90_semaphore_bytes, static_cast<std::size_t>(2 * 16 * 16 * 4));  // 16 query blocks of 64
    EXPECT_EQ(det.workspace_bytes, det.d_sum_bytes + det.dq_accum_bytes + det.sm90_semaphore_bytes);
    const cuda::Sm90BackwardBlocks b = cuda::sm90_backward_blocks(d);
    EXPECT_LE(cuda::sm90_backward_smem_bytes(b, d), 227 * 1024) << "d " << d;
    EXPECT_NE(cuda::describe_backward_sm90(det, true).find("semaphores"), std::string::npos);
  }
}

// d = 256's tile (plan.hpp): 64 keys, the MMA warpgroups split dK/dV's columns, no bulk dQ
// tile (so bulk requests plan atomic dQ, and the reason says why), shared memory under
// the opt-in limit; d = 64 / 128 keep the key split and bulk dQ.
TEST(CudaSm90BackwardPlan, HeadDim256Tile) {
  const cuda::Sm90BackwardBlocks b = cuda::sm90_backward_blocks(256);
  EXPECT_EQ(b.block_n, 64);
  EXPECT_EQ(b.block_m, 64);
  EXPECT_EQ(b.split, cuda::Sm90BwdWarpgroupSplit::columns);
  EXPECT_FALSE(cuda::sm90_backward_bulk_dq_fits(256));
  EXPECT_LE(cuda::sm90_backward_smem_bytes(b, 256), 227 * 1024);
  for (int d : {64, 128}) {
    EXPECT_EQ(cuda::sm90_backward_blocks(d).split, cuda::Sm90BwdWarpgroupSplit::keys);
    EXPECT_EQ(cuda::sm90_backward_blocks(d).block_n, 128);
    EXPECT_TRUE(cuda::sm90_backward_bulk_dq_fits(d));
  }
  const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
  const cuda::BackwardPlan plan =
      cuda::plan_backward_sm90(256, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 1000, 1000}, false);
  EXPECT_EQ(plan.sm90_dq, 0);
  EXPECT_EQ(plan.sm90_warpgroup_split, 1);
  EXPECT_EQ(plan.blocks.block_n, 64);
  const std::string why = cuda::describe_backward_sm90(plan, false, true);
  EXPECT_NE(why.find("half of the columns"), std::string::npos) << why;
  EXPECT_NE(why.find("no shared memory for the bulk"), std::string::npos) << why;
  EXPECT_EQ(cuda::plan_backward_sm90(128, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 1000, 1000}, false).sm90_dq, 1);
}

// d = 96 (plan.hpp): d = 128's tile on columns padded to whole 64-column panels, bulk dQ kept,
// shared memory (and the bulk dQ tiles) as at d = 128.
TEST(CudaSm90BackwardPlan, HeadDim96PaddedTile) {
  EXPECT_EQ(cuda::sm90_backward_smem_columns(96), 128);
  EXPECT_EQ(cuda::sm90_backward_smem_columns(64), 64);
  EXPECT_EQ(cuda::sm90_backward_smem_columns(128), 128);
  const cuda::Sm90BackwardBlocks b = cuda::sm90_backward_blocks(96);
  EXPECT_EQ(b.block_n, 128);
  EXPECT_EQ(b.split, cuda::Sm90BwdWarpgroupSplit::keys);
  EXPECT_TRUE(cuda::sm90_backward_bulk_dq_fits(96));
  EXPECT_EQ(cuda::sm90_backward_smem_bytes(b, 96), cuda::sm90_backward_smem_bytes(cuda::sm90_backward_blocks(128), 128));
  EXPECT_EQ(cuda::sm90_backward_dq_tile_bytes(96), cuda::sm90_backward_dq_tile_bytes(128));
  const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
  const cuda::BackwardPlan plan =
      cuda::plan_backward_sm90(96, 2, 16, 16, cuda::Sm90MaskShape{-1, 0, true, 1000, 1000}, false);
  EXPECT_EQ(plan.sm90_dq, 1);
  EXPECT_EQ(plan.sm90_warpgroup_split, 0);
  EXPECT_GE(plan.dq_accum_bytes, static_cast<std::size_t>(2 * 1000 * 16 * 96 * 4));
}

// The tile-ordered dQ accumulator (plan.hpp; bulk and atomic_tiles): room for every tile row of
// the call ([tile row][heads][two warpgroup tiles]), padded and varlen; atomic dQ keeps
// [total_q][heads][head_dim]; d = 256 has atomic_tiles but not bulk (no shared memory).
TEST(CudaSm90BackwardPlan, TiledDqAccumulatorHoldsEveryTile) {
  for (const char* mode : {"atomic_tiles", "bulk"}) {
    const ScopedEnv dq("FASTATTN_CUDA_SM90_BWD_DQ", std::string(mode));
    const bool bulk = std::string(mode) == "bulk";
    for (int d : {64, 96, 128, 256}) {
      const cuda::BackwardPlan padded =
          cuda::plan_backward_sm90(d, 3, 5, 5, cuda::Sm90MaskShape{-1, 0, true, 1000, 700}, false);
      const std::string why = cuda::describe_backward_sm90(padded, false);
      if (bulk && d == 256) {
        EXPECT_EQ(padded.sm90_dq, static_cast<int>(cuda::Sm90DqReduction::atomic));
        continue;
      }
      EXPECT_EQ(padded.sm90_dq,
                static_cast<int>(bulk ? cuda::Sm90DqReduction::bulk : cuda::Sm90DqReduction::atomic_tiles));
      EXPECT_NE(why.find(bulk ? "bulk reduce-add per warpgroup tile" : "red.global.add.v4"), std::string::npos) << why;
      EXPECT_EQ(why.find("no shared memory"), std::string::npos) << why;
      const std::size_t tile_floats = static_cast<std::size_t>(cuda::sm90_backward_dq_tile_bytes(d)) / 4 * 2;
      EXPECT_GE(padded.dq_accum_bytes, static_cast<std::size_t>(3 * 16) * 5 * tile_floats * 4) << "d " << d;
      const cuda::BackwardPlan varlen =
          cuda::plan_backward_sm90(d, 4, 5, 5, cuda::Sm90MaskShape{-1, 0, true, 900, 900}, true, 2000);
      EXPECT_GE(varlen.dq_accum_bytes, static_cast<std::size_t>(2000 / 64 + 4) * 5 * tile_floats * 4) << "d " << d;
      EXPECT_EQ(varlen.workspace_bytes, varlen.d_sum_bytes + varlen.dq_accum_bytes + varlen.sm90_semaphore_bytes);
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
