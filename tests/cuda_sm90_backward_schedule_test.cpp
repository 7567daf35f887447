// cuda_sm90_backward_schedule_test.cpp — the sm90 backward's deterministic schedule, on the CPU
// (label `cpu`): a step-level model of the grid (tile_scheduler.hpp's tiles, walks and ranks,
// plan.hpp's tile order, dq_writer.cuh's semaphore protocol with and without late release)
// run with few and many resident CTAs, dispatched in launch order as the hardware does.
//   - No schedule deadlocks: whatever fits on the device, some resident CTA can always move.
//   - Every (batch, head, query block) receives its dQ adds in one order: ranks 0, 1, 2, ...
//     (the semaphore's count is exactly the rank when a CTA adds).
//   - Ranks against the launch order deadlock (the negative control).
//   - The model's steps, with late release: on one causal head shortest first never waits
//     where ascending ranks wait about a step per lower key block, yet on many heads the
//     default (ascending key blocks across heads) finishes no later, and head-major (the order
//     of calls without a mask before) waits most.
// The model counts steps, not time; speed is measured on the GPU (cuda_bench determinism).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "common/mask.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"

namespace fastattn::testing {
namespace {

using cuda::Sm90TileOrder;

struct Shape {
  int batch = 1, kv_heads = 1, group = 1;
  std::vector<int> len_q, len_k;  // per sequence (varlen when they differ)
  std::int64_t left = -1, right = -1;
  bool bottom_right = true;
  int block_m = 64, block_n = 128;
};

struct Outcome {
  bool deadlock = false;
  bool out_of_order = false;  // an add whose semaphore count was not its rank
  bool counts_wrong = false;  // a semaphore that did not end at its query block's adders
  std::int64_t rounds = 0;    // until the last CTA finished
  std::int64_t idle = 0;      // resident CTA-rounds spent waiting for a turn
  std::int64_t steps = 0;     // all CTAs' steps (the work)
};

// One round is one step's GEMMs. Every resident CTA that is not waiting runs the GEMMs of its
// next step and (late release) counts the previous step's adds; then the CTAs at a dQ output add
// where their turn has come (count == rank), or wait. Without late release an add is counted at
// once, and the CTAs at an output are swept until none moves, so a chain of key blocks can add
// within one round (the link between one and the next is the adds' and the fence's latency,
// taken as 0 here); with late release it is seen from the next round on (the link is a step).
// `ranks` other than the order's own are the negative control: they must deadlock.
Outcome simulate(const Shape& s, Sm90TileOrder order, int resident, bool late_release,
                 std::optional<bool> shortest_first_ranks = std::nullopt) {
  int max_len_k = 0;
  for (int b = 0; b < s.batch; ++b) max_len_k = std::max(max_len_k, s.len_k[static_cast<std::size_t>(b)]);
  const int n_blocks = (max_len_k + s.block_n - 1) / s.block_n;
  const std::int64_t tiles = static_cast<std::int64_t>(n_blocks) * s.kv_heads * s.batch;
  const bool shortest_first =
      shortest_first_ranks.value_or(cuda::sm90_dq_shortest_first(true, static_cast<int>(order)));

  struct Cta {
    cuda::Sm90BackwardWork w;
    int step = 0;                // next step whose GEMMs run
    bool at_output = false;      // its GEMMs ran; the dQ output waits for the turn
    std::tuple<int, int, int> pending{-1, -1, -1};  // late release: the adds not yet counted
  };
  std::map<std::tuple<int, int, int>, int> count;  // (batch, head, query block) -> adders counted
  std::map<std::tuple<int, int, int>, int> adders;  // -> the CTAs with a step on it
  auto key = [](const cuda::Sm90BackwardWork& w, int step) {
    return std::make_tuple(w.batch, w.head(step), w.m_block(step));
  };
  Outcome out;
  std::vector<Cta> running;
  std::int64_t next = 0;
  while (next < tiles || !running.empty()) {
    while (static_cast<int>(running.size()) < resident && next < tiles) {
      const int b = cuda::sm90_backward_tile(next, n_blocks, s.kv_heads, s.batch, static_cast<int>(order)).batch;
      Cta c;
      c.w = cuda::sm90_backward_work(next, n_blocks, s.kv_heads, s.batch, static_cast<int>(order), s.group,
                                     s.len_q[static_cast<std::size_t>(b)], s.len_k[static_cast<std::size_t>(b)],
                                     s.left, s.right, s.bottom_right, s.block_m, s.block_n, shortest_first);
      out.steps += c.w.steps;
      for (int i = 0; i < c.w.steps; ++i) ++adders[std::make_tuple(c.w.batch, c.w.head(i), c.w.m_block(i))];
      ++next;
      if (c.w.steps > 0) running.push_back(c);
    }
    if (running.empty()) continue;
    ++out.rounds;
    bool moved = false;
    for (Cta& c : running) {
      if (c.at_output) continue;
      c.at_output = true;
      moved = true;
      if (late_release && std::get<0>(c.pending) >= 0) ++count[c.pending];
    }
    std::vector<bool> added(running.size(), false);
    for (bool swept = true; swept;) {
      swept = false;
      for (std::size_t r = 0; r < running.size(); ++r) {
        Cta& c = running[r];
        if (!c.at_output || added[r]) continue;
        const auto k = key(c.w, c.step);
        const int rank = c.w.dq_rank(c.w.m_block(c.step), s.block_m, s.block_n);
        if (count[k] < rank) continue;
        if (count[k] != rank) out.out_of_order = true;
        added[r] = true;
        swept = moved = true;
        if (late_release) {
          c.pending = k;
        } else {
          ++count[k];
        }
        c.at_output = false;
        ++c.step;
      }
    }
    for (std::size_t r = 0; r < running.size(); ++r) out.idle += running[r].at_output ? 1 : 0;
    for (auto it = running.begin(); it != running.end();) {
      if (it->step == it->w.steps) {
        if (late_release) ++count[it->pending];
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    if (!moved) {
      out.deadlock = true;
      return out;
    }
  }
  for (const auto& [k, n] : adders) out.counts_wrong = out.counts_wrong || count[k] != n;
  return out;
}

Shape square(int seqlen, int heads, std::int64_t right, int block_n = 128) {
  Shape s;
  s.batch = 1;
  s.kv_heads = heads;
  s.len_q = s.len_k = {seqlen};
  s.right = right;
  s.block_n = block_n;
  return s;
}

// Random masks, lengths (varlen with empty sequences), GQA and residency: never a deadlock,
// never an add out of its order, in the plan's deterministic orders (the default, and shortest
// first) and in head-major (FASTATTN_CUDA_SM90_BWD_ORDER=head_major), with and without late
// release.
TEST(CudaSm90BackwardSchedule, DeterministicOrdersNeverDeadlockAndAddInRankOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 250; ++trial) {
    Shape s;
    s.batch = 1 + static_cast<int>(rng() % 3);
    s.kv_heads = 1 + static_cast<int>(rng() % 2);
    s.group = 1 + static_cast<int>(rng() % 3);
    s.block_n = rng() % 4 == 0 ? 64 : 128;  // d = 256 runs 64 x 64
    const bool varlen = rng() % 2 == 0;
    const int len_q0 = static_cast<int>(rng() % 900), len_k0 = static_cast<int>(rng() % 900);
    for (int b = 0; b < s.batch; ++b) {
      s.len_q.push_back(varlen ? static_cast<int>(rng() % 900) : len_q0);
      s.len_k.push_back(varlen ? static_cast<int>(rng() % 900) : len_k0);
    }
    const int kind = static_cast<int>(rng() % 4);
    s.left = kind == 2 || kind == 3 ? static_cast<std::int64_t>(rng() % 300) : -1;
    s.right = kind == 1 ? 0 : kind == 3 ? static_cast<std::int64_t>(rng() % 80) : -1;
    s.bottom_right = rng() % 2 == 0;
    int max_q = 0, max_k = 0;
    for (int b = 0; b < s.batch; ++b) {
      max_q = std::max(max_q, s.len_q[static_cast<std::size_t>(b)]);
      max_k = std::max(max_k, s.len_k[static_cast<std::size_t>(b)]);
    }
    // The plan decides on the padded (longest) shape, as plan_backward_sm90 does for varlen.
    const cuda::Sm90MaskShape shape{s.left, s.right, s.bottom_right, max_q, max_k};
    for (const Sm90TileOrder order : {cuda::sm90_tile_order(shape, s.block_n, true),
                                      cuda::sm90_tile_order(shape, s.block_n, true, true), Sm90TileOrder::head_major}) {
      for (const int resident : {1, 2, 5, 132}) {
        for (const bool late : {false, true}) {
          const Outcome o = simulate(s, order, resident, late);
          ASSERT_FALSE(o.deadlock) << "trial " << trial << " order " << static_cast<int>(order) << " resident "
                                   << resident << " late " << late;
          EXPECT_FALSE(o.out_of_order) << "trial " << trial << " order " << static_cast<int>(order);
          EXPECT_FALSE(o.counts_wrong) << "trial " << trial << " order " << static_cast<int>(order);
        }
      }
    }
  }
}

// The negative control: ranks that do not match the launch order (shortest-first ranks under an
// ascending launch, ascending ranks under a descending one) wait on key blocks launched later
// and deadlock with few CTAs resident.
TEST(CudaSm90BackwardSchedule, RanksAgainstTheLaunchOrderDeadlock) {
  const Shape s = square(2048, 2, 0);
  EXPECT_TRUE(simulate(s, Sm90TileOrder::key_block_ascending, 2, true, true).deadlock);
  EXPECT_TRUE(simulate(s, Sm90TileOrder::key_block_descending, 2, true, false).deadlock);
  EXPECT_FALSE(simulate(s, Sm90TileOrder::key_block_ascending, 2, true).deadlock);
  EXPECT_FALSE(simulate(s, Sm90TileOrder::key_block_descending, 2, true).deadlock);
}

// One causal head with every CTA resident, late release: shortest first never waits (key block
// n + 1 reached each shared query block a step or more earlier); ascending ranks wait about a
// step per lower key block. The makespan is key block 0's either way.
TEST(CudaSm90BackwardSchedule, ShortestFirstDoesNotWaitOnOneCausalHead) {
  for (const int block_n : {128, 64}) {
    for (const int seqlen : {1024, 4096}) {
      const Shape s = square(seqlen, 1, 0, block_n);
      const cuda::Sm90MaskShape shape{-1, 0, true, seqlen, seqlen};
      ASSERT_EQ(cuda::sm90_tile_order(shape, block_n, true), Sm90TileOrder::key_block_ascending);
      ASSERT_EQ(cuda::sm90_tile_order(shape, block_n, true, true), Sm90TileOrder::key_block_descending);
      const Outcome spt = simulate(s, Sm90TileOrder::key_block_descending, 1 << 20, true);
      const Outcome ascending = simulate(s, Sm90TileOrder::key_block_ascending, 1 << 20, true);
      EXPECT_EQ(spt.idle, 0) << "seqlen " << seqlen << " block_n " << block_n;
      const std::int64_t n_blocks = seqlen / block_n;
      EXPECT_GE(ascending.idle, n_blocks * (n_blocks - 1) / 4) << "seqlen " << seqlen;
      EXPECT_EQ(spt.rounds, ascending.rounds) << "seqlen " << seqlen;
      EXPECT_EQ(spt.steps, ascending.steps);
    }
  }
}

// Many causal heads on 132 SMs, late release: the default (ascending key blocks across heads,
// longest first) finishes no later than shortest first, whose longest key blocks run last; this
// is why shortest first is an opt-in (plan.hpp). Head-major is the slowest.
TEST(CudaSm90BackwardSchedule, DefaultOrderFinishesCausalHeadsNoLaterThanShortestFirst) {
  for (const auto& [batch_heads, seqlen] : std::vector<std::pair<int, int>>{{32, 4096}, {32, 8192}, {128, 4096}}) {
    const Shape s = square(seqlen, batch_heads, 0);
    const Outcome ascending = simulate(s, Sm90TileOrder::key_block_ascending, 132, true);
    const Outcome spt = simulate(s, Sm90TileOrder::key_block_descending, 132, true);
    const Outcome head_major = simulate(s, Sm90TileOrder::head_major, 132, true);
    EXPECT_LE(ascending.rounds, spt.rounds) << batch_heads << " heads, seqlen " << seqlen;
    EXPECT_LT(ascending.rounds, head_major.rounds) << batch_heads << " heads, seqlen " << seqlen;
  }
}

// Without a mask every key block sees every query block and they all walk the same order: a
// key block runs behind the one before it. Head-major puts all of a head's key blocks on the
// device at once (key block n starts about n steps late); ascending key blocks across heads
// (the deterministic plan) has only a few of one head's key blocks resident at a time.
TEST(CudaSm90BackwardSchedule, AscendingAcrossHeadsWaitsLessThanHeadMajorWithoutAMask) {
  const Shape s = square(8192, 32, -1);  // b1 h32 s8k: 64 key blocks, 132 resident
  const Sm90TileOrder planned = cuda::sm90_tile_order(cuda::Sm90MaskShape{-1, -1, true, 8192, 8192}, 128, true);
  ASSERT_EQ(planned, Sm90TileOrder::key_block_ascending);
  const Outcome across = simulate(s, planned, 132, true);
  const Outcome head_major = simulate(s, Sm90TileOrder::head_major, 132, true);
  EXPECT_LT(across.idle * 4, head_major.idle);
  EXPECT_LT(across.rounds, head_major.rounds);
}

}  // namespace
}  // namespace fastattn::testing
