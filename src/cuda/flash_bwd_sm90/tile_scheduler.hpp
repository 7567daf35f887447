// tile_scheduler.hpp — which (key block, KV head, batch) a CTA of the sm90 backward owns, the
// query blocks it walks, and the rank of its dQ adds in deterministic mode. Host and device
// (the CPU unit tests check the ranges and ranks against brute force over random masks).
//
// Grid: 1-D, one CTA per tile, in the order of plan.hpp's Sm90TileOrder (longest first for
// causal, low key blocks seeing the most query blocks; causal calls of more than 4 (batch, KV
// head) pairs within groups of 4 pairs, plan.hpp sm90_tile_group; deterministic calls of more
// than 4 pairs within groups of 4 too, where a key block is still launched after those ranked
// before it). Not persistent: CTAs are
// scheduled by the hardware in launch order, which deterministic mode relies on (below).
//
// A CTA walks, for each query head of its KV head (GQA: dK and dV summed over them), the query
// blocks that see its keys: step i is head kv_head * group + i / blocks, and query block
// m_end - 1 - i % blocks (descending), or m_begin + i % blocks (ascending) in deterministic
// mode's shortest-first order below.
//
// Deterministic mode: the dQ adds of a (batch, head, query block) happen in one fixed key-block
// order, and a CTA waits only for key blocks launched before it (so no CTA waits on one that
// cannot be resident; relies on in-order CTA dispatch, as FlashAttention-3's deterministic mode
// does). The key blocks n that see query block m are the contiguous range [first_key_block(m),
// last_key_block(m)] (the query-block range below is exact, so the two views of "block pair
// (m, n) has a visible element" agree). A semaphore per (batch, head, query block) counts the
// adders that finished; a CTA waits until it counts every adder ranked before it (rank x adders
// per CTA). Two orders, chosen by the tile order (sm90_dq_shortest_first):
//   ascending key blocks (Sm90TileOrder::key_block_ascending, the default, or head_major): rank
//     n - first_key_block(m); query blocks walked descending, every CTA of a (batch, KV head)
//     in the same order, so key block n runs about one step behind key block n - 1 where they
//     run at the same time (descending, so that every CTA of a causal (batch, KV head) starts
//     on the one query block they all share).
//   shortest first (Sm90TileOrder::key_block_descending, right-bounded masks, opt-in through
//     FASTATTN_CUDA_SM90_BWD_ORDER=shortest_first; FlashAttention-3's "SPT" deterministic
//     order): rank last_key_block(m) - n; key blocks launched from the last (the shortest, for
//     a right bound) and query blocks walked ascending from the diagonal. Key block n + 1
//     reached query block m about block_n / block_m steps before key block n does, so no key
//     block waits on its shared query blocks; but the longest key blocks run last.
#pragma once

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"

namespace fastattn::cuda {

struct Sm90BackwardTile {
  int n_block, kv_head, batch;
};

// Tile t of the grid. The key-block orders run longest first across every (batch, KV head) pair,
// or, with group_pairs in (0, pairs), within groups of that many pairs, one group after the other
// (the last group may be smaller): key block n of a group's pairs, then n + 1, ... Grouped, the
// CTAs resident at once share fewer pairs' Q and dO, which can then stay in L2, while each
// group's long key blocks still run first (plan.hpp: sm90_tile_group, 4 pairs for causal calls
// and for deterministic calls of any mask).
FASTATTN_HD Sm90BackwardTile sm90_backward_tile(std::int64_t t, int n_blocks, int kv_heads, int batch, int order,
                                                int group_pairs = 0) {
  Sm90BackwardTile tile;
  const std::int64_t heads = static_cast<std::int64_t>(kv_heads) * batch;
  if (order == static_cast<int>(Sm90TileOrder::head_major)) {
    tile.n_block = static_cast<int>(t % n_blocks);
    const std::int64_t rest = t / n_blocks;
    tile.kv_head = static_cast<int>(rest % kv_heads);
    tile.batch = static_cast<int>(rest / kv_heads);
  } else {
    // (first pair of t's group, pairs in it, t within it); every group before t's is full.
    std::int64_t first = 0, pairs = heads, r = t;
    if (group_pairs > 0 && group_pairs < heads) {
      const std::int64_t per_group = static_cast<std::int64_t>(group_pairs) * n_blocks;
      const std::int64_t g = t / per_group;
      first = g * group_pairs;
      pairs = heads - first < group_pairs ? heads - first : group_pairs;
      r = t - g * per_group;
    }
    const std::int64_t slot = r / pairs;
    tile.n_block = order == static_cast<int>(Sm90TileOrder::key_block_ascending)
                       ? static_cast<int>(slot)
                       : n_blocks - 1 - static_cast<int>(slot);
    const std::int64_t rest = first + r % pairs;
    tile.kv_head = static_cast<int>(rest % kv_heads);
    tile.batch = static_cast<int>(rest / kv_heads);
  }
  return tile;
}

// Query blocks [m_begin, m_end) with a query that sees a key of [k0, min(k0 + block_n, len_k)):
// the inverse of SequenceMask::key_begin / key_end (as in the sm80 backward, kernel.cuh).
struct QueryBlockRange {
  int m_begin, m_end;
};
FASTATTN_HD QueryBlockRange sm90_query_blocks(const SequenceMask& mask, int k0, int block_n, int block_m, int len_q,
                                              int len_k) {
  const std::int64_t k1 = k0 + block_n < len_k ? k0 + block_n : len_k;
  std::int64_t q_begin = 0, q_end = len_q;
  if (mask.right >= 0) {
    const std::int64_t b = k0 - mask.offset - mask.right;
    q_begin = b > 0 ? b : 0;
  }
  if (mask.left >= 0) {
    const std::int64_t e = (k1 - 1) - mask.offset + mask.left + 1;
    q_end = e < len_q ? e : len_q;
  }
  QueryBlockRange r;
  r.m_begin = static_cast<int>(q_begin / block_m);
  r.m_end = q_begin < q_end && k0 < k1 ? static_cast<int>((q_end + block_m - 1) / block_m) : r.m_begin;
  return r;
}

// The lowest key block that sees query block m (the ascending ranks' origin).
FASTATTN_HD int sm90_first_key_block(const SequenceMask& mask, int m, int block_m, int block_n) {
  return static_cast<int>(mask.key_begin(static_cast<std::int64_t>(m) * block_m) / block_n);
}
// The highest key block that sees query block m (the shortest-first ranks' origin): the last key
// its last row inside the sequence sees (a right bound's key_end rises with the row; without
// one it is the last key). Meaningful for query blocks some key block sees.
FASTATTN_HD int sm90_last_key_block(const SequenceMask& mask, int m, int block_m, int block_n, int len_q) {
  const std::int64_t q1 = static_cast<std::int64_t>(m + 1) * block_m < len_q ? static_cast<std::int64_t>(m + 1) * block_m
                                                                             : static_cast<std::int64_t>(len_q);
  return static_cast<int>((mask.key_end(q1) - 1) / block_n);
}

// Deterministic mode's order (above): shortest first where the tile order launches the last key
// blocks first. Non-deterministic kernels pass false and walk descending whatever the order.
FASTATTN_HD bool sm90_dq_shortest_first(bool deterministic, int order) {
  return deterministic && order == static_cast<int>(Sm90TileOrder::key_block_descending);
}

// One CTA's work (both roles derive the same).
struct Sm90BackwardWork {
  int n_block, kv_head, batch;
  int k0;              // first key of the tile
  int m_begin, m_end;  // query blocks seeing it
  int full_m_begin, full_m_end;  // query blocks whose tile with it has no masked element (mask.hpp)
  int group_size;      // query heads per KV head
  int steps;           // (m_end - m_begin) * group_size; 0: dK = dV = 0, nothing loaded
  int len_q, len_k;
  int q_start, k_start;  // varlen: the sequence's first token (cu_seqlens); padded: 0, unused
  bool shortest_first;   // deterministic mode's shortest-first order: query blocks ascending
  SequenceMask mask;

  FASTATTN_HD int head(int step) const { return kv_head * group_size + step / (m_end - m_begin); }
  // Whether query block m's tile needs no mask (SequenceMask::classify would call it full).
  FASTATTN_HD bool full_tile(int m) const { return m >= full_m_begin && m < full_m_end; }
  FASTATTN_HD int m_block(int step) const {
    return shortest_first ? m_begin + step % (m_end - m_begin) : m_end - 1 - step % (m_end - m_begin);
  }
  // Deterministic mode: how many key blocks add to query block m before this one.
  FASTATTN_HD int dq_rank(int m, int block_m, int block_n) const {
    return shortest_first ? sm90_last_key_block(mask, m, block_m, block_n, len_q) - n_block
                          : n_block - sm90_first_key_block(mask, m, block_m, block_n);
  }
};

// A CTA's steps as running counters: (head(i), m_block(i)) without the division by the query
// blocks per head. The producer walks them this way; with the work in shared memory the MMA
// warpgroups do too (a division on every step, and ptxas spilled around it at d = 128).
struct Sm90StepCursor {
  int head, m_block;
  FASTATTN_HD static Sm90StepCursor first(const Sm90BackwardWork& w) {
    return {w.kv_head * w.group_size, w.shortest_first ? w.m_begin : w.m_end - 1};
  }
  FASTATTN_HD void advance(const Sm90BackwardWork& w) {
    if (w.shortest_first) {
      if (++m_block == w.m_end) {
        m_block = w.m_begin;
        ++head;
      }
    } else if (--m_block < w.m_begin) {
      m_block = w.m_end - 1;
      ++head;
    }
  }
};

// The work of the CTA that owns `tile` (varlen: len_q / len_k are its sequence's).
FASTATTN_HD Sm90BackwardWork sm90_backward_work(const Sm90BackwardTile& tile, int group_size, int len_q, int len_k,
                                                std::int64_t window_left, std::int64_t window_right,
                                                bool bottom_right, int block_m, int block_n, bool shortest_first) {
  Sm90BackwardWork w;
  w.n_block = tile.n_block;
  w.kv_head = tile.kv_head;
  w.batch = tile.batch;
  w.k0 = tile.n_block * block_n;
  w.group_size = group_size;
  w.len_q = len_q;
  w.len_k = len_k;
  w.q_start = 0;
  w.k_start = 0;
  w.shortest_first = shortest_first;
  w.mask.left = window_left;
  w.mask.right = window_right;
  w.mask.offset = bottom_right ? static_cast<std::int64_t>(len_k) - len_q : 0;
  w.mask.seqlen_k = len_k;
  const QueryBlockRange r = sm90_query_blocks(w.mask, w.k0, block_n, block_m, len_q, len_k);
  w.m_begin = r.m_begin;
  w.m_end = r.m_end;
  // With the work (once per CTA with the work in shared memory, per step otherwise) instead of
  // classify's 64-bit arithmetic on every step (~45 SASS instructions a step on the unmasked
  // path at d = 64).
  const SequenceMask::QueryTileRange full = w.mask.full_query_tiles(w.k0, w.k0 + block_n, block_m);
  w.full_m_begin = static_cast<int>(full.lo < r.m_end ? full.lo : r.m_end);
  w.full_m_end = static_cast<int>(full.hi < r.m_end ? full.hi : r.m_end);
  w.steps = (r.m_end - r.m_begin) * group_size;
  return w;
}

// The work of grid tile t (padded calls: every sequence len_q / len_k long).
FASTATTN_HD Sm90BackwardWork sm90_backward_work(std::int64_t t, int n_blocks, int kv_heads, int batch, int order,
                                                int group_size, int len_q, int len_k, std::int64_t window_left,
                                                std::int64_t window_right, bool bottom_right, int block_m,
                                                int block_n, bool shortest_first, int group_pairs = 0) {
  return sm90_backward_work(sm90_backward_tile(t, n_blocks, kv_heads, batch, order, group_pairs), group_size, len_q,
                            len_k, window_left, window_right, bottom_right, block_m, block_n, shortest_first);
}

}  // namespace fastattn::cuda
