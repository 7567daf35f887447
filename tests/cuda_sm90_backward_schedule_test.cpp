// cuda_sm90_backward_schedule_test.cpp — the sm90 backward's schedule, on the CPU (label `cpu`):
// a step-level model of the grid (the kernel's tiles, walks and ranks from tile_scheduler.hpp,
// whose pieces cuda_sm90_backward_scheduler_test.cpp checks against brute force;
// dq_writer.cuh's semaphore protocol with and without late release, and the dQ writer warp's,
// counting at once, with one or two sdQ buffers and a count latency of some rounds) run with
// few and many resident CTAs, dispatched in launch order as the hardware does.
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
#include <utility>
#include <vector>

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
  int group_pairs = 0;  // the tile order's groups of (batch, KV head) pairs (plan.hpp sm90_tile_group); 0: one
};

struct Outcome {
  bool deadlock = false;
  bool out_of_order = false;  // an add whose semaphore count was not its rank
  bool counts_wrong = false;  // a semaphore that did not end at its query block's adders
  std::int64_t rounds = 0;    // until the last CTA finished
  std::int64_t idle = 0;      // resident CTA-rounds spent waiting for a turn
  std::int64_t steps = 0;     // all CTAs' steps (the work)
};

// (batch, head, query block): a semaphore's key.
using SemaphoreKey = std::tuple<int, int, int>;
SemaphoreKey semaphore_key(const cuda::Sm90BackwardWork& w, int step) {
  return std::make_tuple(w.batch, w.head(step), w.m_block(step));
}

// A call's grid in launch order, as the hardware dispatches it: the kernel's tiles and work
// for the shape and order, `shortest_first_ranks` (the negative control) overriding the order's
// own ranks. Both models below take their CTAs from it.
class Grid {
 public:
  Grid(const Shape& s, Sm90TileOrder order, std::optional<bool> shortest_first_ranks)
      : s_(s), order_(static_cast<int>(order)) {
    int max_len_k = 0;
    for (int b = 0; b < s.batch; ++b) max_len_k = std::max(max_len_k, s.len_k[static_cast<std::size_t>(b)]);
    n_blocks_ = (max_len_k + s.block_n - 1) / s.block_n;
    tiles_ = static_cast<std::int64_t>(n_blocks_) * s.kv_heads * s.batch;
    shortest_first_ = shortest_first_ranks.value_or(cuda::sm90_dq_shortest_first(true, order_));
  }
  bool launched_all() const { return next_ >= tiles_; }
  // Launches CTAs in order until `resident` run (those without steps end at once), adding
  // their steps to out.steps and to `adders` (the CTAs with a step on each semaphore).
  template <class Cta>
  void fill(std::vector<Cta>& running, int resident, Outcome& out, std::map<SemaphoreKey, int>& adders) {
    while (static_cast<int>(running.size()) < resident && next_ < tiles_) {
      const int b = cuda::sm90_backward_tile(next_, n_blocks_, s_.kv_heads, s_.batch, order_, s_.group_pairs).batch;
      Cta c;
      c.w = cuda::sm90_backward_work(next_, n_blocks_, s_.kv_heads, s_.batch, order_, s_.group,
                                     s_.len_q[static_cast<std::size_t>(b)], s_.len_k[static_cast<std::size_t>(b)],
                                     s_.left, s_.right, s_.bottom_right, s_.block_m, s_.block_n, shortest_first_,
                                     s_.group_pairs);
      out.steps += c.w.steps;
      for (int i = 0; i < c.w.steps; ++i) ++adders[semaphore_key(c.w, i)];
      ++next_;
      if (c.w.steps > 0) running.push_back(c);
    }
  }

 private:
  const Shape& s_;
  int order_;
  int n_blocks_ = 0;
  std::int64_t tiles_ = 0;
  bool shortest_first_ = false;
  std::int64_t next_ = 0;
};

// Whether every semaphore ended at its query block's adders.
bool counts_wrong(const std::map<SemaphoreKey, int>& count, const std::map<SemaphoreKey, int>& adders) {
  for (const auto& [k, n] : adders) {
    const auto it = count.find(k);
    if ((it == count.end() ? 0 : it->second) != n) return true;
  }
  return false;
}

// Takes the CTAs that `finished` says are done out of `running`; with late release (late) the
// adds a CTA still holds back (its `pending` semaphore) are counted as it ends, by `count_pending`.
template <class Cta, class Finished, class CountPending>
void retire(std::vector<Cta>& running, Finished finished, bool late, CountPending count_pending) {
  for (auto it = running.begin(); it != running.end();) {
    if (finished(*it)) {
      if (late) count_pending(it->pending);
      it = running.erase(it);
    } else {
      ++it;
    }
  }
}

// One round is one step's GEMMs. Every resident CTA that is not waiting runs the GEMMs of its
// next step and (late release) counts the previous step's adds; then the CTAs at a dQ output add
// where their turn has come (count == rank), or wait. Without late release an add is counted at
// once, and the CTAs at an output are swept until none moves, so a chain of key blocks can add
// within one round (the link between one and the next is the adds' and the fence's latency,
// taken as 0 here); with late release it is seen from the next round on (the link is a step).
// `ranks` other than the order's own are the negative control: they must deadlock.
Outcome simulate(const Shape& s, Sm90TileOrder order, int resident, bool late_release,
                 std::optional<bool> shortest_first_ranks = std::nullopt) {
  struct Cta {
    cuda::Sm90BackwardWork w;
    int step = 0;                // next step whose GEMMs run
    bool at_output = false;      // its GEMMs ran; the dQ output waits for the turn
    SemaphoreKey pending{-1, -1, -1};  // late release: the adds not yet counted
  };
  std::map<SemaphoreKey, int> count;   // adders counted
  std::map<SemaphoreKey, int> adders;  // the CTAs with a step on it
  Grid grid(s, order, shortest_first_ranks);
  Outcome out;
  std::vector<Cta> running;
  while (!grid.launched_all() || !running.empty()) {
    grid.fill(running, resident, out, adders);
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
        const SemaphoreKey k = semaphore_key(c.w, c.step);
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
    retire(running, [](const auto& c) { return c.step == c.w.steps; }, late_release,
           [&count](const SemaphoreKey& k) { ++count[k]; });
    if (!moved) {
      out.deadlock = true;
      return out;
    }
  }
  out.counts_wrong = counts_wrong(count, adders);
  return out;
}

// The same grid with the dQ writer warp (dq_writer.cuh: run_dq_writer, bulk mode): a CTA's MMA
// warpgroups and its writer move apart. Each round the MMA side runs the GEMMs of its next step;
// it stores that step's dQ tile once the writer has issued the step that last used the sdQ
// buffer (dq_empty: with one buffer the previous step, with `buffers` of them step i - buffers),
// and only then goes on to the next step's GEMMs. The writer issues stored steps in order, each
// when its turn has come and counts its adds at once (the single writer before its next turn,
// each of the deterministic kernels' several writers after its step; the model does not tell
// them apart). A count is seen `count_latency` rounds after it is made (0: in the
// same round; the GPU's is the adds' completion, the fences and the release, and the poll that
// sees it, a few steps' time at d = 64). Within a round the stores and the issues are swept until
// none moves.
struct WriterModel {
  int buffers = 1;        // sdQ buffers per warpgroup (plan.hpp: sm90_backward_dq_buffers)
  int count_latency = 0;  // rounds until a count is seen
};
Outcome simulate_writer(const Shape& s, Sm90TileOrder order, int resident, const WriterModel& m,
                        std::optional<bool> shortest_first_ranks = std::nullopt) {
  struct Cta {
    cuda::Sm90BackwardWork w;
    int gemm_step = 0;       // the MMA side's next step
    bool gemms_done = false;  // its GEMMs ran, its tile waits for sdQ
    int issued = 0;          // the writer's steps issued
  };
  std::map<SemaphoreKey, int> count, adders;
  std::vector<std::pair<std::int64_t, SemaphoreKey>> in_flight;  // (round seen, semaphore) of counts
  auto add_count = [&](const SemaphoreKey& k, std::int64_t round) {
    if (m.count_latency == 0) {
      ++count[k];
    } else {
      in_flight.emplace_back(round + m.count_latency, k);
    }
  };
  Grid grid(s, order, shortest_first_ranks);
  Outcome out;
  std::vector<Cta> running;
  while (!grid.launched_all() || !running.empty()) {
    grid.fill(running, resident, out, adders);
    if (running.empty()) continue;
    ++out.rounds;
    bool moved = false;
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      if (it->first <= out.rounds) {
        ++count[it->second];
        it = in_flight.erase(it);
      } else {
        ++it;
      }
    }
    for (Cta& c : running) {
      if (c.gemms_done || c.gemm_step == c.w.steps) continue;
      c.gemms_done = true;
      moved = true;
    }
    for (bool swept = true; swept;) {
      swept = false;
      for (Cta& c : running) {
        // The MMA side stores its tile once the writer has issued the buffer's previous step.
        if (c.gemms_done && c.issued >= c.gemm_step - (m.buffers - 1)) {
          c.gemms_done = false;
          ++c.gemm_step;
          swept = moved = true;
        }
        // The writer issues the next stored step when its turn has come.
        if (c.issued < c.gemm_step) {
          const SemaphoreKey k = semaphore_key(c.w, c.issued);
          const int rank = c.w.dq_rank(c.w.m_block(c.issued), s.block_m, s.block_n);
          if (count[k] >= rank) {
            if (count[k] != rank) out.out_of_order = true;
            add_count(k, out.rounds);
            ++c.issued;
            swept = moved = true;
          }
        }
      }
    }
    for (const Cta& c : running) out.idle += c.gemms_done || c.issued < c.gemm_step ? 1 : 0;
    running.erase(std::remove_if(running.begin(), running.end(), [](const Cta& c) { return c.issued == c.w.steps; }),
                  running.end());
    if (!moved && in_flight.empty()) {
      out.deadlock = true;
      return out;
    }
  }
  for (const auto& [round, k] : in_flight) ++count[k];
  out.counts_wrong = counts_wrong(count, adders);
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
// first; calls within groups of pairs, varlen too) and in head-major
// (FASTATTN_CUDA_SM90_BWD_ORDER=head_major), with and without late release.
TEST(CudaSm90BackwardSchedule, DeterministicOrdersNeverDeadlockAndAddInRankOrder) {
  std::mt19937 rng(11);
  int grouped = 0;  // trials run in groups of pairs
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
    // The plan decides on the padded (longest) shape, as plan_backward_sm90 does for varlen;
    // calls (varlen too) in its groups of pairs, here of 1-3 pairs (of up to 6).
    const cuda::Sm90MaskShape shape{s.left, s.right, s.bottom_right, max_q, max_k};
    const std::int64_t group_pairs = 1 + static_cast<std::int64_t>(rng() % 3);
    for (const Sm90TileOrder order : {cuda::sm90_tile_order(shape, s.block_n, true),
                                      cuda::sm90_tile_order(shape, s.block_n, true, true), Sm90TileOrder::head_major}) {
      s.group_pairs = static_cast<int>(cuda::sm90_tile_group(shape, order, cuda::Sm90OrderSwitch::automatic, true,
                                                             static_cast<std::int64_t>(s.batch) * s.kv_heads, group_pairs));
      grouped += s.group_pairs > 0;
      for (const int resident : {1, 2, 5, 132}) {
        for (const bool late : {false, true}) {
          const Outcome o = simulate(s, order, resident, late);
          ASSERT_FALSE(o.deadlock) << "trial " << trial << " order " << static_cast<int>(order) << " resident "
                                   << resident << " late " << late;
          EXPECT_FALSE(o.out_of_order) << "trial " << trial << " order " << static_cast<int>(order);
          EXPECT_FALSE(o.counts_wrong) << "trial " << trial << " order " << static_cast<int>(order);
        }
        // The dQ writer warp's protocol.
        const Outcome wr = simulate_writer(s, order, resident, WriterModel{});
        ASSERT_FALSE(wr.deadlock) << "writer: trial " << trial << " order " << static_cast<int>(order)
                                  << " resident " << resident;
        EXPECT_FALSE(wr.out_of_order) << "writer: trial " << trial << " order " << static_cast<int>(order);
        EXPECT_FALSE(wr.counts_wrong) << "writer: trial " << trial << " order " << static_cast<int>(order);
        // Two sdQ buffers and a count latency of one or two rounds (counting at once).
        WriterModel m;
        m.buffers = 2;
        m.count_latency = 1 + trial % 2;
        const Outcome wb = simulate_writer(s, order, resident, m);
        ASSERT_FALSE(wb.deadlock) << "writer, 2 buffers: trial " << trial << " order " << static_cast<int>(order)
                                  << " resident " << resident;
        EXPECT_FALSE(wb.out_of_order) << "writer, 2 buffers: trial " << trial;
        EXPECT_FALSE(wb.counts_wrong) << "writer, 2 buffers: trial " << trial;
      }
    }
  }
  EXPECT_GT(grouped, 50);
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
  EXPECT_TRUE(simulate_writer(s, Sm90TileOrder::key_block_ascending, 2, WriterModel{}, true).deadlock);
  EXPECT_TRUE(simulate_writer(s, Sm90TileOrder::key_block_descending, 2, WriterModel{}, false).deadlock);
  EXPECT_FALSE(simulate_writer(s, Sm90TileOrder::key_block_ascending, 2, WriterModel{}).deadlock);
  EXPECT_FALSE(simulate_writer(s, Sm90TileOrder::key_block_descending, 2, WriterModel{}).deadlock);
  // Two sdQ buffers and a count latency keep the control's power.
  WriterModel m;
  m.buffers = 2;
  m.count_latency = 2;
  EXPECT_TRUE(simulate_writer(s, Sm90TileOrder::key_block_ascending, 2, m, true).deadlock);
  EXPECT_TRUE(simulate_writer(s, Sm90TileOrder::key_block_descending, 2, m, false).deadlock);
  EXPECT_FALSE(simulate_writer(s, Sm90TileOrder::key_block_ascending, 2, m).deadlock);
  EXPECT_FALSE(simulate_writer(s, Sm90TileOrder::key_block_descending, 2, m).deadlock);
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

// Many causal heads on 132 SMs, late release: ascending key blocks across heads (longest first,
// one group: the deterministic default before the twenty-sixth session's groups of pairs, which
// the model, having no L2, does not favour) finishes no later than shortest first, whose longest
// key blocks run last; this is why shortest first is an opt-in (plan.hpp). Head-major is the
// slowest.
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
// (the deterministic order in one group of all pairs) has only a few of one head's key blocks
// resident at a time. (The plan now runs groups of 4 pairs, for L2, which this model leaves out.)
TEST(CudaSm90BackwardSchedule, AscendingAcrossHeadsWaitsLessThanHeadMajorWithoutAMask) {
  const Shape s = square(8192, 32, -1);  // b1 h32 s8k: 64 key blocks, 132 resident
  const Sm90TileOrder planned = cuda::sm90_tile_order(cuda::Sm90MaskShape{-1, -1, true, 8192, 8192}, 128, true);
  ASSERT_EQ(planned, Sm90TileOrder::key_block_ascending);
  const Outcome across = simulate(s, planned, 132, true);
  const Outcome head_major = simulate(s, Sm90TileOrder::head_major, 132, true);
  EXPECT_LT(across.idle * 4, head_major.idle);
  EXPECT_LT(across.rounds, head_major.rounds);
}

// The deterministic order without a mask, counts seen 1-4 rounds late (the GPU's count latency
// is a few steps at d = 64): a key block that runs beside the one before it trails it by the
// latency, but only the CTAs that start together pay it, once, and the waves' starts stagger.
// s 4k, 64 (batch, KV head) pairs (the pairs of the deterministic d = 64 row, b2 h32): 1024
// rounds, +1..4; 16 pairs: 256 rounds, +7..28 (up to 11%). A second sdQ buffer changes no round
// here: the model's steps take one round each, without the jitter a buffer absorbs. So the order
// cannot explain the deterministic d = 64 row's 1.35x launch on the GPU
// (docs/cuda-sm90-backward-dq.md "Two dQ writers").
TEST(CudaSm90BackwardSchedule, CountLatencyCostsTheOrderFewRoundsWithoutAMask) {
  for (const int pairs : {64, 16}) {
    const Shape s = square(4096, pairs, -1);
    const Sm90TileOrder order = cuda::sm90_tile_order(cuda::Sm90MaskShape{-1, -1, true, 4096, 4096}, 128, true);
    const Outcome at_once = simulate_writer(s, order, 132, WriterModel{});
    ASSERT_FALSE(at_once.deadlock);
    for (const int latency : {1, 2, 4}) {
      std::int64_t one_buffer_rounds = -1;
      for (const int buffers : {1, 2}) {
        WriterModel m;
        m.buffers = buffers;
        m.count_latency = latency;
        const Outcome o = simulate_writer(s, order, 132, m);
        ASSERT_FALSE(o.deadlock) << pairs << " pairs, latency " << latency << ", buffers " << buffers;
        EXPECT_FALSE(o.out_of_order);
        EXPECT_GT(o.rounds, at_once.rounds) << pairs << " pairs, latency " << latency;
        EXPECT_LE(o.rounds, at_once.rounds + 8 * latency) << pairs << " pairs, latency " << latency;
        EXPECT_LE(o.rounds * 100, at_once.rounds * 112) << pairs << " pairs, latency " << latency;
        if (buffers == 1) one_buffer_rounds = o.rounds;
        EXPECT_EQ(o.rounds, one_buffer_rounds) << pairs << " pairs, latency " << latency;
      }
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
