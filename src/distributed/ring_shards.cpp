// ring_shards.cpp — SequenceShards (which global tokens each rank holds) and the copies between
// a global tensor and a rank's shard of it.
#include <algorithm>
#include <cstring>

#include "api/view_checks.hpp"
#include "distributed/ring_plan.hpp"

namespace fastattn::distributed {

std::int64_t SequenceShards::local_length(int rank) const {
  std::int64_t n = 0;
  for (const TokenChunk& c : chunks.at(static_cast<std::size_t>(rank))) n += c.length;
  return n;
}

SequenceShards SequenceShards::contiguous(const std::vector<std::int64_t>& lengths) {
  SequenceShards s;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    if (lengths[r] < 0)
      fail_argument("SequenceShards::contiguous: lengths[" + std::to_string(r) + "]", ">= 0", std::to_string(lengths[r]));
    s.chunks.push_back({TokenChunk{s.seqlen, lengths[r]}});
    s.seqlen += lengths[r];
  }
  return s;
}

SequenceShards SequenceShards::contiguous(std::int64_t seqlen, int world) {
  if (world < 1) fail_argument("SequenceShards::contiguous: world", ">= 1", std::to_string(world));
  if (seqlen < 0) fail_argument("SequenceShards::contiguous: seqlen", ">= 0", std::to_string(seqlen));
  std::vector<std::int64_t> lengths;
  for (int r = 0; r < world; ++r) lengths.push_back(seqlen * (r + 1) / world - seqlen * r / world);
  return contiguous(lengths);
}

SequenceShards SequenceShards::zigzag(std::int64_t seqlen, int world) {
  if (world < 1) fail_argument("SequenceShards::zigzag: world", ">= 1", std::to_string(world));
  if (seqlen < 0) fail_argument("SequenceShards::zigzag: seqlen", ">= 0", std::to_string(seqlen));
  const std::int64_t parts = 2 * static_cast<std::int64_t>(world);
  auto chunk = [&](std::int64_t c) { return TokenChunk{seqlen * c / parts, seqlen * (c + 1) / parts - seqlen * c / parts}; };
  SequenceShards s;
  s.seqlen = seqlen;
  for (int r = 0; r < world; ++r) s.chunks.push_back({chunk(r), chunk(parts - 1 - r)});
  return s;
}

void check_shards(const SequenceShards& s, int world, const std::string& arg) {
  if (s.world_size() != world)
    fail_argument(arg, "one entry of chunks per rank (" + std::to_string(world) + ")", std::to_string(s.world_size()));
  std::vector<TokenChunk> all;
  for (const auto& rank_chunks : s.chunks)
    for (const TokenChunk& c : rank_chunks) {
      if (c.start < 0 || c.length < 0)
        fail_argument(arg, "chunks with start >= 0 and length >= 0", "[" + std::to_string(c.start) + ", +" + std::to_string(c.length) + ")");
      if (c.length > 0) all.push_back(c);
    }
  std::sort(all.begin(), all.end(), [](const TokenChunk& a, const TokenChunk& b) { return a.start < b.start; });
  std::int64_t next = 0;
  for (const TokenChunk& c : all) {
    if (c.start != next)
      fail_argument(arg, "chunks that cover [0, seqlen = " + std::to_string(s.seqlen) + ") once",
                    "a chunk starting at " + std::to_string(c.start) + " where token " + std::to_string(next) + " was due");
    next += c.length;
  }
  if (next != s.seqlen)
    fail_argument(arg, "chunks that cover [0, seqlen = " + std::to_string(s.seqlen) + ") once", "chunks covering [0, " + std::to_string(next) + ")");
}

std::vector<BlockPair> block_pairs(const std::vector<TokenChunk>& q_chunks, const std::vector<TokenChunk>& k_chunks,
                                   bool causal, std::int64_t offset) {
  std::vector<BlockPair> pairs;
  std::int64_t q_local = 0;
  for (const TokenChunk& qc : q_chunks) {
    std::int64_t k_local = 0;
    for (const TokenChunk& kc : k_chunks) {
      BlockPair p{q_local, qc.length, k_local, kc.length, -1};
      if (causal) {
        // Key b of kc visible to query a of qc when kc.start + b <= qc.start + a + offset,
        // i.e. b <= a + t. Rows a < -t see none of kc; keys b >= qc.length + t are seen by none.
        const std::int64_t t = qc.start + offset - kc.start;
        const std::int64_t a0 = std::max<std::int64_t>(0, -t);
        p.q_begin += a0;
        p.q_len = qc.length - a0;
        p.k_len = std::min(kc.length, qc.length + t);
        p.window_right = a0 + t;  // >= 0; top-left: row a' sees b <= a' + window_right
        if (p.window_right >= p.k_len - 1) p.window_right = -1;  // every row sees every key
      }
      if (p.q_len > 0 && p.k_len > 0) pairs.push_back(p);
      k_local += kc.length;
    }
    q_local += qc.length;
  }
  return pairs;
}

namespace {

void check_global_local(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local,
                        int token_dim, const std::string& fn) {
  check_view_layout(global, fn + ": global");
  check_view_layout(local, fn + ": local");
  const int expected_rank = token_dim == 1 ? 4 : 3;
  for (const TensorView* t : {&global, &local}) {
    const std::string arg = fn + (t == &global ? ": global" : ": local");
    if (t->rank != expected_rank)
      fail_argument(arg, std::to_string(expected_rank) + "-D", std::to_string(t->rank) + "-D " + t->shape_string());
    if (t->device.type != DeviceType::cpu) fail_argument(arg, "a CPU tensor", to_string(t->device));
    if (t->stride[t->rank - 1] != 1 && t->shape[t->rank - 1] > 1)
      fail_argument(arg, "a contiguous last dimension (stride 1)", std::to_string(t->stride[t->rank - 1]));
  }
  if (rank < 0 || rank >= shards.world_size())
    fail_argument(fn + ": rank", "a rank in [0, " + std::to_string(shards.world_size()) + ")", std::to_string(rank));
  if (global.dtype != local.dtype) fail_argument(fn + ": local", std::string("dtype ") + to_string(global.dtype), to_string(local.dtype));
  if (global.shape[token_dim] != shards.seqlen)
    fail_argument(fn + ": global", "shape[" + std::to_string(token_dim) + "] = seqlen " + std::to_string(shards.seqlen),
                  std::to_string(global.shape[token_dim]));
  if (local.shape[token_dim] != shards.local_length(rank))
    fail_argument(fn + ": local", "shape[" + std::to_string(token_dim) + "] = the rank's " + std::to_string(shards.local_length(rank)) + " tokens",
                  std::to_string(local.shape[token_dim]));
  for (int d = 0; d < expected_rank; ++d)
    if (d != token_dim && global.shape[d] != local.shape[d])
      fail_argument(fn + ": local", "shape " + global.shape_string() + " but for the tokens", local.shape_string());
}

// Copies the rank's tokens between global and local; to_local picks the direction.
void copy_tokens(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local,
                 int token_dim, bool to_local) {
  const std::size_t elem = dtype_size(global.dtype);
  auto* g = static_cast<std::uint8_t*>(global.data);
  auto* l = static_cast<std::uint8_t*>(local.data);
  std::int64_t local_token = 0;
  for (const TokenChunk& c : shards.chunks[static_cast<std::size_t>(rank)]) {
    for (std::int64_t i = 0; i < c.length; ++i) {
      const std::int64_t gt = c.start + i, lt = local_token + i;
      if (token_dim == 1) {  // [batch, tokens, heads, dim]: one head row at a time
        const std::size_t row = static_cast<std::size_t>(global.shape[3]) * elem;
        for (std::int64_t b = 0; b < global.shape[0]; ++b)
          for (std::int64_t h = 0; h < global.shape[2]; ++h) {
            std::uint8_t* gp = g + static_cast<std::int64_t>(elem) * (b * global.stride[0] + gt * global.stride[1] + h * global.stride[2]);
            std::uint8_t* lp = l + static_cast<std::int64_t>(elem) * (b * local.stride[0] + lt * local.stride[1] + h * local.stride[2]);
            std::memcpy(to_local ? lp : gp, to_local ? gp : lp, row);
          }
      } else {  // lse [batch, heads, tokens]
        for (std::int64_t b = 0; b < global.shape[0]; ++b)
          for (std::int64_t h = 0; h < global.shape[1]; ++h) {
            std::uint8_t* gp = g + static_cast<std::int64_t>(elem) * (b * global.stride[0] + h * global.stride[1] + gt * global.stride[2]);
            std::uint8_t* lp = l + static_cast<std::int64_t>(elem) * (b * local.stride[0] + h * local.stride[1] + lt * local.stride[2]);
            std::memcpy(to_local ? lp : gp, to_local ? gp : lp, elem);
          }
      }
    }
    local_token += c.length;
  }
}

}  // namespace

void shard_tokens(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local) {
  check_global_local(shards, rank, global, local, 1, "shard_tokens");
  copy_tokens(shards, rank, global, local, 1, true);
}
void unshard_tokens(const SequenceShards& shards, int rank, const TensorView& local, const TensorView& global) {
  check_global_local(shards, rank, global, local, 1, "unshard_tokens");
  copy_tokens(shards, rank, global, local, 1, false);
}
void shard_lse(const SequenceShards& shards, int rank, const TensorView& global, const TensorView& local) {
  check_global_local(shards, rank, global, local, 2, "shard_lse");
  copy_tokens(shards, rank, global, local, 2, true);
}
void unshard_lse(const SequenceShards& shards, int rank, const TensorView& local, const TensorView& global) {
  check_global_local(shards, rank, global, local, 2, "unshard_lse");
  copy_tokens(shards, rank, global, local, 2, false);
}

}  // namespace fastattn::distributed
