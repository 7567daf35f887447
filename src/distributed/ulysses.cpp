// ulysses.cpp — Ulysses all-to-all context parallelism on CPU ranks (fastattn/distributed.hpp).
//
// Rank r holds tokens shards.chunks[r] of every head. All-to-all #1 (tokens_to_heads) gives it
// every token of head block r (num_heads / P query heads, num_kv_heads / P KV heads: GQA groups
// stay whole because the KV block r serves exactly query block r). One fastattn::forward /
// backward over the whole sequence, with the plain causal mask since tokens are back in global
// order. All-to-all #2 (heads_to_tokens) returns out / dq / dk / dv to the token shards. Each
// all-to-all is P - 1 send_recv rounds (round s: to rank + s, from rank - s) plus a local copy.
#include <cstring>
#include <functional>
#include <vector>

#include "api/view_checks.hpp"
#include "distributed/comm_common.hpp"
#include "distributed/ring_plan.hpp"
#include "distributed/sharded_checks.hpp"
#include "fastattn/attention.hpp"

namespace fastattn::distributed {
namespace {

// lse [B, H, L] seen as [B, L, H, 1]: the token-major layout the all-to-all moves.
TensorView lse_as_tokens(const TensorView& lse) {
  TensorView t = lse;
  t.rank = 4;
  t.shape[0] = lse.shape[0];
  t.shape[1] = lse.shape[2];
  t.shape[2] = lse.shape[1];
  t.shape[3] = 1;
  t.stride[0] = lse.stride[0];
  t.stride[1] = lse.stride[2];
  t.stride[2] = lse.stride[1];
  t.stride[3] = 1;
  return t;
}

// Global token index of each of a rank's local tokens.
std::vector<std::int64_t> global_positions(const SequenceShards& shards, int rank) {
  std::vector<std::int64_t> p;
  for (const TokenChunk& c : shards.chunks[static_cast<std::size_t>(rank)])
    for (std::int64_t i = 0; i < c.length; ++i) p.push_back(c.start + i);
  return p;
}

// Row (b, t, h) of a [B, T, H, W] view: W contiguous elements.
std::uint8_t* row(const TensorView& v, std::int64_t b, std::int64_t t, std::int64_t h) {
  return static_cast<std::uint8_t*>(v.data) +
         (b * v.stride[0] + t * v.stride[1] + h * v.stride[2]) * static_cast<std::int64_t>(dtype_size(v.dtype));
}

// One all-to-all: for each round, pack(to) fills `send` with what rank `to` gets from this
// rank, and unpack(from) reads what rank `from` sent. Sizes in elements of `dtype`.
template <typename Pack, typename Unpack>
void all_to_all(Communicator& comm, DType dtype, Pack pack, Unpack unpack, const std::function<std::int64_t(int)>& send_elems,
                const std::function<std::int64_t(int)>& recv_elems) {
  const int world = comm.size(), me = comm.rank();
  std::vector<std::uint8_t> send, recv;
  for (int s = 0; s < world; ++s) {
    const int to = (me + s) % world, from = (me - s + world) % world;
    send.resize(static_cast<std::size_t>(send_elems(to)) * dtype_size(dtype));
    pack(to, send.data());
    if (s == 0) {
      unpack(from, send.data());
      continue;
    }
    recv.resize(static_cast<std::size_t>(recv_elems(from)) * dtype_size(dtype));
    comm.send_recv(make_tensor(send.data(), dtype, {send_elems(to)}), to, make_tensor(recv.data(), dtype, {recv_elems(from)}), from);
    unpack(from, recv.data());
  }
}

// local [B, L_me, Hx, W] (this rank's tokens, all heads) -> full [B, S, Hx / P, W] (every token,
// head block `me`), positions from `shards`.
void tokens_to_heads(Communicator& comm, const SequenceShards& shards, const TensorView& local, const TensorView& full) {
  const int world = comm.size(), me = comm.rank();
  const std::int64_t batch = local.shape[0], block = full.shape[2], width = local.shape[3];
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(local.dtype);
  const std::vector<std::int64_t> mine = global_positions(shards, me);
  std::vector<std::vector<std::int64_t>> positions(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) positions[static_cast<std::size_t>(r)] = global_positions(shards, r);
  all_to_all(
      comm, local.dtype,
      [&](int to, std::uint8_t* out) {  // [B, L_me, block, W]: my tokens, head block `to`
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::size_t t = 0; t < mine.size(); ++t)
            for (std::int64_t h = 0; h < block; ++h, out += row_bytes)
              std::memcpy(out, row(local, b, static_cast<std::int64_t>(t), to * block + h), row_bytes);
      },
      [&](int from, const std::uint8_t* in) {  // rank `from`'s tokens of head block `me`
        const std::vector<std::int64_t>& pos = positions[static_cast<std::size_t>(from)];
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t t : pos)
            for (std::int64_t h = 0; h < block; ++h, in += row_bytes) std::memcpy(row(full, b, t, h), in, row_bytes);
      },
      [&](int) { return batch * static_cast<std::int64_t>(mine.size()) * block * width; },
      [&](int from) { return batch * static_cast<std::int64_t>(positions[static_cast<std::size_t>(from)].size()) * block * width; });
}

// full [B, S, Hx / P, W] (head block `me`) -> local [B, L_me, Hx, W].
void heads_to_tokens(Communicator& comm, const SequenceShards& shards, const TensorView& full, const TensorView& local) {
  const int world = comm.size(), me = comm.rank();
  const std::int64_t batch = local.shape[0], block = full.shape[2], width = local.shape[3];
  const std::size_t row_bytes = static_cast<std::size_t>(width) * dtype_size(local.dtype);
  std::vector<std::vector<std::int64_t>> positions(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r) positions[static_cast<std::size_t>(r)] = global_positions(shards, r);
  const std::int64_t mine = static_cast<std::int64_t>(positions[static_cast<std::size_t>(me)].size());
  all_to_all(
      comm, local.dtype,
      [&](int to, std::uint8_t* out) {  // rank `to`'s tokens, my head block
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t t : positions[static_cast<std::size_t>(to)])
            for (std::int64_t h = 0; h < block; ++h, out += row_bytes) std::memcpy(out, row(full, b, t, h), row_bytes);
      },
      [&](int from, const std::uint8_t* in) {  // my tokens, head block `from`
        for (std::int64_t b = 0; b < batch; ++b)
          for (std::int64_t t = 0; t < mine; ++t)
            for (std::int64_t h = 0; h < block; ++h, in += row_bytes) std::memcpy(row(local, b, t, from * block + h), in, row_bytes);
      },
      [&](int to) { return batch * static_cast<std::int64_t>(positions[static_cast<std::size_t>(to)].size()) * block * width; },
      [&](int) { return batch * mine * block * width; });
}

struct HeadBlocks {
  std::int64_t q = 0, kv = 0;  // heads per rank
};
HeadBlocks head_blocks(const Communicator& comm, const Geometry& g, const std::string& fn) {
  const std::int64_t p = comm.size();
  if (g.heads % p != 0)
    fail_argument(fn + ": q", "shape[2] (num_heads) divisible by the world size " + std::to_string(p), std::to_string(g.heads));
  if (g.kv_heads % p != 0)
    fail_argument(fn + ": k", "shape[2] (num_kv_heads) divisible by the world size " + std::to_string(p) +
                                  " (Ulysses splits KV heads; ring attention does not)",
                  std::to_string(g.kv_heads));
  return {g.heads / p, g.kv_heads / p};
}

// A contiguous buffer for a head-sharded tensor [B, S, block, D].
struct Full {
  std::vector<std::uint8_t> bytes;
  TensorView view;
  Full(DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d)
      : bytes(static_cast<std::size_t>(b * s * h * d) * dtype_size(dtype)) {
    view = make_tensor(bytes.data(), dtype, {b, s, h, d});
  }
};

AttentionOptions full_options(const RingOptions& o, const Geometry& g) {
  AttentionOptions a;
  a.softmax_scale = g.scale;
  a.causal = o.causal;
  a.backend = o.backend == Backend::automatic ? Backend::cpu : o.backend;
  a.num_threads = o.num_threads;
  return a;
}

}  // namespace

RingReport ulysses_attention_forward(Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                                     const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                                     const std::optional<TensorView>& lse, const RingOptions& options) {
  const std::string fn = "ulysses_attention_forward";
  const Geometry g = validate(comm, q_shards, kv_shards, q, k, v, options, fn);
  check_like(out, q, fn + ": out", "q");
  if (lse) check_lse(*lse, g, fn + ": lse");
  const HeadBlocks hb = head_blocks(comm, g, fn);
  const std::int64_t sq = q_shards.seqlen, sk = kv_shards.seqlen;
  // Head-sharded: fq, fo [B, Sq, hb.q, D]; fk, fv [B, Sk, hb.kv, D]; flse [B, hb.q, Sq] f32.
  Full fq(g.dtype, g.batch, sq, hb.q, g.dim), fk(g.dtype, g.batch, sk, hb.kv, g.dim), fv(g.dtype, g.batch, sk, hb.kv, g.dim),
      fo(g.dtype, g.batch, sq, hb.q, g.dim);
  std::vector<float> flse(static_cast<std::size_t>(g.batch * hb.q * sq));
  const TensorView flse_v = make_tensor(flse.data(), DType::f32, {g.batch, hb.q, sq});
  RingReport report;
  report.steps = 1;
  with_abort_on_failure(comm, "Ulysses attention", [&] {
    tokens_to_heads(comm, q_shards, q, fq.view);
    tokens_to_heads(comm, kv_shards, k, fk.view);
    tokens_to_heads(comm, kv_shards, v, fv.view);
    report.kernel = forward(fq.view, fk.view, fv.view, fo.view, flse_v, full_options(options, g)).kernel;
    report.block_calls = 1;
    heads_to_tokens(comm, q_shards, fo.view, out);
    if (lse) heads_to_tokens(comm, q_shards, lse_as_tokens(flse_v), lse_as_tokens(*lse));
  });
  return report;
}

RingReport ulysses_attention_backward(Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                                      const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                                      const TensorView& dv, const RingOptions& options) {
  const std::string fn = "ulysses_attention_backward";
  const Geometry g = validate(comm, q_shards, kv_shards, q, k, v, options, fn);
  check_like(dout, q, fn + ": dout", "q");
  check_like(out, q, fn + ": out", "q");
  check_like(dq, q, fn + ": dq", "q");
  check_like(dk, k, fn + ": dk", "k");
  check_like(dv, k, fn + ": dv", "k");
  check_lse(lse, g, fn + ": lse");
  const HeadBlocks hb = head_blocks(comm, g, fn);
  const std::int64_t sq = q_shards.seqlen, sk = kv_shards.seqlen;
  Full fq(g.dtype, g.batch, sq, hb.q, g.dim), fo(g.dtype, g.batch, sq, hb.q, g.dim), fdo(g.dtype, g.batch, sq, hb.q, g.dim),
      fdq(g.dtype, g.batch, sq, hb.q, g.dim), fk(g.dtype, g.batch, sk, hb.kv, g.dim), fv(g.dtype, g.batch, sk, hb.kv, g.dim),
      fdk(g.dtype, g.batch, sk, hb.kv, g.dim), fdv(g.dtype, g.batch, sk, hb.kv, g.dim);
  std::vector<float> flse(static_cast<std::size_t>(g.batch * hb.q * sq));
  const TensorView flse_v = make_tensor(flse.data(), DType::f32, {g.batch, hb.q, sq});
  RingReport report;
  report.steps = 1;
  with_abort_on_failure(comm, "Ulysses attention", [&] {
    tokens_to_heads(comm, q_shards, q, fq.view);
    tokens_to_heads(comm, q_shards, out, fo.view);
    tokens_to_heads(comm, q_shards, dout, fdo.view);
    tokens_to_heads(comm, q_shards, lse_as_tokens(lse), lse_as_tokens(flse_v));
    tokens_to_heads(comm, kv_shards, k, fk.view);
    tokens_to_heads(comm, kv_shards, v, fv.view);
    report.kernel =
        backward(fdo.view, fq.view, fk.view, fv.view, fo.view, flse_v, fdq.view, fdk.view, fdv.view, full_options(options, g)).kernel;
    report.block_calls = 1;
    heads_to_tokens(comm, q_shards, fdq.view, dq);
    heads_to_tokens(comm, kv_shards, fdk.view, dk);
    heads_to_tokens(comm, kv_shards, fdv.view, dv);
  });
  return report;
}

}  // namespace fastattn::distributed
