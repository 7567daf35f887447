// cuda_sm90_backward_scheduler_test.cpp — the sm90 backward's tile scheduler, on the CPU (label
// `cpu`): tile_scheduler.hpp's tile orders, query-block ranges, full-tile ranges and
// deterministic ranks against brute force over random masks, and plan.hpp's orders and groups of
// pairs. The step-level model of the grid that runs these schedules is
// cuda_sm90_backward_schedule_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "common/mask.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"

namespace fastattn::testing {
namespace {

using cuda::Sm90TileOrder;

TEST(CudaSm90BackwardScheduler, TileOrdersAreBijectionsAndLongestFirst) {
  const int n_blocks = 7, kv_heads = 3, batch = 2;
  for (Sm90TileOrder order :
       {Sm90TileOrder::head_major, Sm90TileOrder::key_block_ascending, Sm90TileOrder::key_block_descending}) {
    std::set<std::int64_t> seen;
    int previous_n = -1;
    for (std::int64_t t = 0; t < n_blocks * kv_heads * batch; ++t) {
      const cuda::Sm90BackwardTile tile = cuda::sm90_backward_tile(t, n_blocks, kv_heads, batch, static_cast<int>(order));
      ASSERT_TRUE(tile.n_block >= 0 && tile.n_block < n_blocks && tile.kv_head >= 0 && tile.kv_head < kv_heads &&
                  tile.batch >= 0 && tile.batch < batch);
      seen.insert((static_cast<std::int64_t>(tile.batch) * kv_heads + tile.kv_head) * n_blocks + tile.n_block);
      if (order == Sm90TileOrder::key_block_ascending) {
        EXPECT_GE(tile.n_block, previous_n);
      }
      if (order == Sm90TileOrder::key_block_descending && previous_n >= 0) {
        EXPECT_LE(tile.n_block, previous_n);
      }
      previous_n = tile.n_block;
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(n_blocks * kv_heads * batch));
  }
  // Grouped (plan.hpp sm90_tile_group): every tile once; the groups' pairs one
  // after the other (the last group smaller where the pairs do not divide), and within a group
  // the key blocks in the order's direction, each key block for all of the group's pairs.
  for (Sm90TileOrder order : {Sm90TileOrder::key_block_ascending, Sm90TileOrder::key_block_descending}) {
    for (int group : {1, 2, 4, 5, 6, 7}) {
      const int pairs = kv_heads * batch;
      std::set<std::int64_t> seen;
      std::int64_t t = 0;
      for (int first = 0; first < pairs; first += group) {
        const int in_group = std::min(group, pairs - first);
        for (int slot = 0; slot < n_blocks; ++slot) {
          for (int j = 0; j < in_group; ++j, ++t) {
            const cuda::Sm90BackwardTile tile =
                cuda::sm90_backward_tile(t, n_blocks, kv_heads, batch, static_cast<int>(order), group);
            const int pair = tile.batch * kv_heads + tile.kv_head;
            EXPECT_EQ(pair, first + j) << "t " << t << " group " << group;
            EXPECT_EQ(tile.n_block, order == Sm90TileOrder::key_block_ascending ? slot : n_blocks - 1 - slot)
                << "t " << t << " group " << group;
            seen.insert(static_cast<std::int64_t>(pair) * n_blocks + tile.n_block);
          }
        }
      }
      EXPECT_EQ(t, static_cast<std::int64_t>(n_blocks) * pairs);
      EXPECT_EQ(seen.size(), static_cast<std::size_t>(n_blocks * pairs)) << "group " << group;
    }
  }
  // Causal (right-bounded): low key blocks see the most queries, first, in both alignments and
  // with seqlen_q != seqlen_k. Deterministic mode: ascending key blocks across heads for every
  // mask; with shortest first asked for, right-bounded masks launch the last key blocks first.
  auto order = [](std::int64_t left, std::int64_t right, bool bottom_right, std::int64_t sq, std::int64_t sk,
                  bool deterministic, bool shortest_first = false) {
    return cuda::sm90_tile_order(cuda::Sm90MaskShape{left, right, bottom_right, sq, sk}, 128, deterministic,
                                 shortest_first);
  };
  EXPECT_EQ(order(-1, 0, true, 4096, 4096, false), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, 0, true, 4096, 4096, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, 0, true, 4096, 4096, true, true), Sm90TileOrder::key_block_descending);
  EXPECT_EQ(order(-1, 0, true, 4096, 4096, false, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, 0, true, 8192, 1000, false), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, 0, false, 1000, 8192, false), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, -1, true, 4096, 4096, false), Sm90TileOrder::head_major);
  EXPECT_EQ(order(-1, 0, true, 100, 100, false), Sm90TileOrder::head_major);  // one key block
  EXPECT_EQ(order(100, -1, true, 4096, 4096, false), Sm90TileOrder::key_block_descending);
  EXPECT_EQ(order(100, -1, true, 4096, 4096, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(100, -1, true, 4096, 4096, true, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, -1, true, 4096, 4096, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(-1, 0, true, 100, 100, true), Sm90TileOrder::head_major);  // one key block
  // Sliding window (causal with a left bound): the last key blocks lose their window's tail.
  EXPECT_EQ(order(1024, 0, true, 4096, 4096, false), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(100, 5, true, 4096, 4096, true), Sm90TileOrder::key_block_ascending);
  EXPECT_EQ(order(100, 5, true, 4096, 4096, true, true), Sm90TileOrder::key_block_descending);
  EXPECT_EQ(order(5, 100, true, 4096, 4096, false), Sm90TileOrder::key_block_descending);
  EXPECT_EQ(order(5, 100, true, 4096, 4096, true), Sm90TileOrder::key_block_ascending);
  // The groups of pairs (plan.hpp sm90_tile_group): calls of more pairs than a group (varlen too),
  // non-deterministic ones with a right bound only, deterministic ones with any mask or none;
  // FASTATTN_CUDA_SM90_BWD_ORDER=grouped adds the other longest-first orders, longest_first takes
  // them away.
  using cuda::Sm90OrderSwitch;
  auto group = [](cuda::Sm90MaskShape m, Sm90OrderSwitch sw, bool deterministic, std::int64_t pairs) {
    return cuda::sm90_tile_group(m, cuda::sm90_tile_order(m, 128, deterministic), sw, deterministic, pairs, 4);
  };
  const cuda::Sm90MaskShape causal{-1, 0, true, 4096, 4096}, window{1024, 0, true, 4096, 4096},
      left_only{100, -1, true, 4096, 4096}, none{-1, -1, true, 4096, 4096};
  EXPECT_EQ(group(causal, Sm90OrderSwitch::automatic, false, 5), 4);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::automatic, false, 256), 4);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::automatic, false, 4), 0);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::automatic, true, 256), 4);
  EXPECT_EQ(group(window, Sm90OrderSwitch::automatic, true, 256), 4);
  EXPECT_EQ(group(left_only, Sm90OrderSwitch::automatic, true, 256), 4);
  EXPECT_EQ(group(none, Sm90OrderSwitch::automatic, true, 256), 4);
  EXPECT_EQ(group(none, Sm90OrderSwitch::automatic, true, 4), 0);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::longest_first, true, 256), 0);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::shortest_first, false, 256), 4);
  EXPECT_EQ(group(causal, Sm90OrderSwitch::longest_first, false, 256), 0);
  EXPECT_EQ(group(window, Sm90OrderSwitch::automatic, false, 256), 0);
  EXPECT_EQ(group(left_only, Sm90OrderSwitch::automatic, false, 256), 0);
  EXPECT_EQ(group(window, Sm90OrderSwitch::grouped, false, 256), 4);
  EXPECT_EQ(group(left_only, Sm90OrderSwitch::grouped, false, 256), 4);
  EXPECT_EQ(group(none, Sm90OrderSwitch::grouped, false, 256), 0);  // head-major
  EXPECT_EQ(group(cuda::Sm90MaskShape{-1, 0, true, 100, 100}, Sm90OrderSwitch::automatic, false, 256), 0);
  // Windows near INT64_MAX (unbounded in effect) do not overflow.
  EXPECT_EQ(order(std::numeric_limits<std::int64_t>::max(), 0, true, 4096, 4096, false),
            Sm90TileOrder::key_block_ascending);
}

// The query-block range of a key block is exactly the blocks with a visible (query, key) pair,
// the key blocks seeing a query block are the contiguous range [sm90_first_key_block,
// sm90_last_key_block] (deterministic mode's ranks count from either end), and a CTA's steps
// visit each (head, query block) of its range once, query blocks descending (ascending in the
// shortest-first order).
TEST(CudaSm90BackwardScheduler, QueryBlockRangesAndRanksMatchBruteForce) {
  constexpr int kBM = 64, kBN = 128;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int len_q = 1 + static_cast<int>(rng() % 700), len_k = 1 + static_cast<int>(rng() % 700);
    SequenceMask mask;
    const int kind = static_cast<int>(rng() % 4);
    mask.left = kind == 2 || kind == 3 ? static_cast<std::int64_t>(rng() % 200) : -1;
    mask.right = kind == 1 ? 0 : kind == 3 ? static_cast<std::int64_t>(rng() % 50) : -1;
    const bool bottom_right = rng() % 2 == 0;
    mask.offset = bottom_right ? len_k - len_q : 0;
    mask.seqlen_k = len_k;
    const int m_blocks = (len_q + kBM - 1) / kBM, n_blocks = (len_k + kBN - 1) / kBN;
    auto active = [&](int m, int n) {
      for (int i = m * kBM; i < std::min(len_q, (m + 1) * kBM); ++i)
        for (int j = n * kBN; j < std::min(len_k, (n + 1) * kBN); ++j)
          if (mask.visible(i, j)) return true;
      return false;
    };
    std::vector<std::vector<int>> seers(m_blocks);
    for (int n = 0; n < n_blocks; ++n) {
      const cuda::QueryBlockRange r = cuda::sm90_query_blocks(mask, n * kBN, kBN, kBM, len_q, len_k);
      for (int m = 0; m < m_blocks; ++m) {
        EXPECT_EQ(m >= r.m_begin && m < r.m_end, active(m, n))
            << "trial " << trial << " m " << m << " n " << n << " len " << len_q << "x" << len_k;
        if (active(m, n)) seers[m].push_back(n);
      }
    }
    for (int m = 0; m < m_blocks; ++m) {
      if (seers[m].empty()) continue;
      const int first = cuda::sm90_first_key_block(mask, m, kBM, kBN);
      for (std::size_t rank = 0; rank < seers[m].size(); ++rank) {
        EXPECT_EQ(seers[m][rank], first + static_cast<int>(rank)) << "trial " << trial << " m " << m;
      }
      EXPECT_EQ(cuda::sm90_last_key_block(mask, m, kBM, kBN, len_q), seers[m].back()) << "trial " << trial << " m " << m;
    }
    // The plan's rows per key block are the rows of the range above; the order it takes puts
    // the heavier end first, and for one-sided masks the work never rises along it.
    const cuda::Sm90MaskShape shape{mask.left, mask.right, bottom_right, len_q, len_k};
    std::vector<std::int64_t> rows(static_cast<std::size_t>(n_blocks));
    for (int n = 0; n < n_blocks; ++n) {
      rows[static_cast<std::size_t>(n)] = cuda::sm90_key_block_rows(shape, n, kBN);
      std::int64_t brute = 0;
      for (int i = 0; i < len_q; ++i) {
        bool sees = false;
        for (int j = n * kBN; j < std::min(len_k, (n + 1) * kBN) && !sees; ++j) sees = mask.visible(i, j);
        brute += sees ? 1 : 0;
      }
      EXPECT_EQ(rows[static_cast<std::size_t>(n)], brute) << "trial " << trial << " n " << n;
    }
    for (const bool deterministic : {false, true}) {
      const Sm90TileOrder o = cuda::sm90_tile_order(shape, kBN, deterministic);
      if (deterministic) {  // ordered by the dQ adds, not by the work (cuda_sm90_backward_schedule_test)
        EXPECT_EQ(o, n_blocks <= 1 ? Sm90TileOrder::head_major : Sm90TileOrder::key_block_ascending)
            << "trial " << trial;
        EXPECT_EQ(cuda::sm90_tile_order(shape, kBN, true, true),
                  n_blocks <= 1          ? Sm90TileOrder::head_major
                  : mask.right >= 0 ? Sm90TileOrder::key_block_descending
                                    : Sm90TileOrder::key_block_ascending)
            << "trial " << trial;
        continue;
      }
      const std::int64_t first = rows.front(), last = rows.back();
      if (o == Sm90TileOrder::key_block_ascending) {
        EXPECT_GT(first, last) << "trial " << trial;
      }
      if (o == Sm90TileOrder::key_block_descending) {
        EXPECT_GT(last, first) << "trial " << trial;
      }
      if (o != Sm90TileOrder::head_major && (mask.left < 0 || mask.right < 0)) {
        for (int n = 1; n < n_blocks; ++n) {
          const std::int64_t earlier = rows[static_cast<std::size_t>(o == Sm90TileOrder::key_block_ascending ? n - 1 : n)];
          const std::int64_t later = rows[static_cast<std::size_t>(o == Sm90TileOrder::key_block_ascending ? n : n - 1)];
          EXPECT_GE(earlier, later) << "trial " << trial << " n " << n;
        }
      }
    }
    // A CTA's steps (GQA group of 3): every (head, query block) of its range once.
    const int n = static_cast<int>(rng() % n_blocks);
    for (const bool shortest_first : {false, true}) {
      const cuda::Sm90BackwardWork w = cuda::sm90_backward_work(
          n, n_blocks, 1, 1, static_cast<int>(Sm90TileOrder::head_major), 3, len_q, len_k, mask.left, mask.right,
          bottom_right, kBM, kBN, shortest_first);
      EXPECT_EQ(w.n_block, n);
      std::set<std::pair<int, int>> steps;
      for (int i = 0; i < w.steps; ++i) {
        steps.insert({w.head(i), w.m_block(i)});
        if (i > 0 && w.head(i) == w.head(i - 1)) {
          EXPECT_EQ(w.m_block(i), w.m_block(i - 1) + (shortest_first ? 1 : -1));
        }
        // The rank counts the key blocks that add to the query block before this one.
        const std::vector<int>& by = seers[static_cast<std::size_t>(w.m_block(i))];
        const int position = static_cast<int>(std::find(by.begin(), by.end(), n) - by.begin());
        ASSERT_LT(position, static_cast<int>(by.size()));
        EXPECT_EQ(w.dq_rank(w.m_block(i), kBM, kBN), shortest_first ? static_cast<int>(by.size()) - 1 - position : position);
        // The mask is skipped exactly on the tiles classify calls full.
        const int m = w.m_block(i);
        EXPECT_EQ(w.full_tile(m), mask.classify(m * kBM, (m + 1) * kBM, n * kBN, (n + 1) * kBN) == TileClass::full);
      }
      EXPECT_EQ(steps.size(), static_cast<std::size_t>(w.steps));
      EXPECT_EQ(w.steps, 3 * (w.m_end - w.m_begin));
      // The running counters the producer (and the work-in-shared-memory build) walk instead.
      cuda::Sm90StepCursor cursor = cuda::Sm90StepCursor::first(w);
      for (int i = 0; i < w.steps; ++i, cursor.advance(w)) {
        EXPECT_EQ(cursor.head, w.head(i)) << "trial " << trial << " step " << i;
        EXPECT_EQ(cursor.m_block, w.m_block(i)) << "trial " << trial << " step " << i;
      }
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
