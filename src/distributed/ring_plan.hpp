// ring_plan.hpp — which (query rows, key rows) pairs one ring step computes, and with what mask.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fastattn/distributed.hpp"

namespace fastattn::distributed {

// Throws invalid_argument naming `arg` unless `s` has `world` ranks whose chunks cover
// [0, s.seqlen) exactly once.
void check_shards(const SequenceShards& s, int world, const std::string& arg);

// One forward / backward call of a ring step: local query rows [q_begin, q_begin + q_len) of
// this rank against rows [k_begin, k_begin + k_len) of the K/V block it holds. window_right -1:
// every row sees every key; else a top-left aligned window: row a (counted from q_begin) sees key
// b (counted from k_begin) when b <= a + window_right.
struct BlockPair {
  std::int64_t q_begin = 0, q_len = 0;
  std::int64_t k_begin = 0, k_len = 0;
  std::int64_t window_right = -1;
};

// The pairs of a rank's query chunks and a block's key chunks (both in local order). Causal:
// global key j visible to global query i when j <= i + offset (offset = kv seqlen - q seqlen,
// bottom-right), rows and keys that see nothing trimmed and pairs that see nothing left out.
// Non-causal: every pair of non-empty chunks, unmasked.
std::vector<BlockPair> block_pairs(const std::vector<TokenChunk>& q_chunks, const std::vector<TokenChunk>& k_chunks,
                                   bool causal, std::int64_t offset);

}  // namespace fastattn::distributed
