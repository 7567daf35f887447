// tile_scheduler.hpp — which (key block, KV head, batch) a CTA of the sm90 backward owns, the
// query blocks it walks, and the rank of its dQ adds in deterministic mode. Host and device
// (the CPU unit tests check the ranges and ranks against brute force over random masks).
//
// Grid: 1-D, one CTA per tile, in the order of plan.hpp's Sm90TileOrder (longest first for
// causal: low key blocks see the most query blocks). Not persistent: CTAs are scheduled by the
// hardware in launch order, which deterministic mode relies on (below).
//
// A CTA walks, for each query head of its KV head (GQA: dK and dV summed over them), the query
// blocks that see its keys from the last to the first: step i is head kv_head * group +
// i / blocks, query block m_end - 1 - i % blocks. Descending, so that in deterministic mode
// every CTA of a causal (batch, KV head) starts on the one query block they all share and a
// key block waits about one step per lower key block instead of one per query block between
// its diagonal and theirs.
//
// Deterministic mode: the dQ adds of a (batch, head, query block) happen in ascending key-block
// order. Key blocks n that see query block m form the range [first_key_block(m), ...) (the
// query-block range below is exact, so the two views of "block pair (m, n) has a visible
// element" agree); key block n's adds to m are number n - first_key_block(m) in that order, and
// it waits until the block's semaphore counts that many earlier key blocks (times the adds per
// CTA). Waits are only on lower key blocks, launched earlier (Sm90TileOrder keeps key blocks
// ascending in deterministic mode), so no CTA waits on one that cannot be resident.
#pragma once

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"

namespace fastattn::cuda {

struct Sm90BackwardTile {
  int n_block, kv_head, batch;
};

FASTATTN_HD Sm90BackwardTile sm90_backward_tile(std::int64_t t, int n_blocks, int kv_heads, int batch, int order) {
  Sm90BackwardTile tile;
  const std::int64_t heads = static_cast<std::int64_t>(kv_heads) * batch;
  if (order == static_cast<int>(Sm90TileOrder::head_major)) {
    tile.n_block = static_cast<int>(t % n_blocks);
    const std::int64_t rest = t / n_blocks;
    tile.kv_head = static_cast<int>(rest % kv_heads);
    tile.batch = static_cast<int>(rest / kv_heads);
  } else {
    const std::int64_t slot = t / heads;
    tile.n_block = order == static_cast<int>(Sm90TileOrder::key_block_ascending)
                       ? static_cast<int>(slot)
                       : n_blocks - 1 - static_cast<int>(slot);
    const std::int64_t rest = t % heads;
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

// The lowest key block that sees query block m (deterministic mode's rank origin).
FASTATTN_HD int sm90_first_key_block(const SequenceMask& mask, int m, int block_m, int block_n) {
  return static_cast<int>(mask.key_begin(static_cast<std::int64_t>(m) * block_m) / block_n);
}

// One CTA's work (both roles derive the same).
struct Sm90BackwardWork {
  int n_block, kv_head, batch;
  int k0;              // first key of the tile
  int m_begin, m_end;  // query blocks seeing it
  int group_size;      // query heads per KV head
  int steps;           // (m_end - m_begin) * group_size; 0: dK = dV = 0, nothing loaded
  int len_q, len_k;
  int q_start, k_start;  // varlen: the sequence's first token (cu_seqlens); padded: 0, unused
  SequenceMask mask;

  FASTATTN_HD int head(int step) const { return kv_head * group_size + step / (m_end - m_begin); }
  FASTATTN_HD int m_block(int step) const { return m_end - 1 - step % (m_end - m_begin); }
};

FASTATTN_HD Sm90BackwardWork sm90_backward_work(std::int64_t t, int n_blocks, int kv_heads, int batch, int order,
                                                int group_size, int len_q, int len_k, std::int64_t window_left,
                                                std::int64_t window_right, bool bottom_right, int block_m,
                                                int block_n) {
  const Sm90BackwardTile tile = sm90_backward_tile(t, n_blocks, kv_heads, batch, order);
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
  w.mask.left = window_left;
  w.mask.right = window_right;
  w.mask.offset = bottom_right ? static_cast<std::int64_t>(len_k) - len_q : 0;
  w.mask.seqlen_k = len_k;
  const QueryBlockRange r = sm90_query_blocks(w.mask, w.k0, block_n, block_m, len_q, len_k);
  w.m_begin = r.m_begin;
  w.m_end = r.m_end;
  w.steps = (r.m_end - r.m_begin) * group_size;
  return w;
}

}  // namespace fastattn::cuda
