// sharded_checks.hpp — the argument checks of the context-parallel calls (ring attention,
// Ulysses): sharded q, k, v on CPU ranks.
#pragma once

#include <cstdint>
#include <string>

#include "fastattn/distributed.hpp"

namespace fastattn::distributed {

// The sizes of a sharded call, as validated.
struct Geometry {
  DType dtype = DType::f32;
  std::int64_t batch = 0, heads = 0, kv_heads = 0, dim = 0;
  std::int64_t local_q = 0, local_k = 0, max_block = 0;  // max_block: the longest K/V shard
  float scale = 1.0f;
  std::int64_t offset = 0;  // bottom-right: kv seqlen - q seqlen
};

// A 4-D [batch, tokens, heads, head_dim] CPU tensor with head_dim contiguous.
void check_4d(const TensorView& t, const std::string& arg);
// check_4d, and the dtype and shape of `like`.
void check_like(const TensorView& t, const TensorView& like, const std::string& arg, const std::string& like_name);
// An f32 CPU tensor [batch, heads, local_q].
void check_lse(const TensorView& t, const Geometry& g, const std::string& arg);
// The shards (every rank's chunks cover each sequence once), q, k, v, the options; `fn` names
// the call in messages. Throws invalid_argument / unsupported before any communication.
Geometry validate(const Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                  const TensorView& q, const TensorView& k, const TensorView& v, const RingOptions& o,
                  const std::string& fn);

}  // namespace fastattn::distributed
