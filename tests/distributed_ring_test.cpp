// distributed_ring_test.cpp — ring attention on CPU ranks (fastattn/distributed.hpp) against the
// float64 reference of the unsharded call.
//
// A harness Case is the global problem (random q, k, v, dout; never zero). Its tokens are
// sharded over 1-8 in-process ranks (contiguous with uneven lengths, or zigzag), the ring runs,
// the shards are gathered back into the Case's (NaN-poisoned) outputs and judged by the harness
// rule (harness.hpp): error <= 2 x the naive same-precision single-rank error + floor, per row and
// in Frobenius norm, for out, lse, dq, dk, dv. The bound does not depend on the rank count, and
// each world size's error must also stay within 2 x the 1-rank ring's error + the same floor:
// the error does not grow with the number of ranks. The backward is fed the reference out and
// lse (as check_case does), so a forward error cannot hide or fake a backward one.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "fastattn/distributed.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using distributed::Communicator;
using distributed::CpuWorld;
using distributed::SequenceShards;

enum class Layout { uneven, zigzag };

// Uneven contiguous lengths: weights 1, 2, 3, 1, 2, 3, ... (rank 0 gets the least; small
// sequences give some ranks no token at all).
SequenceShards make_shards(Layout layout, std::int64_t seqlen, int world) {
  if (layout == Layout::zigzag) return SequenceShards::zigzag(seqlen, world);
  std::int64_t total_weight = 0;
  for (int r = 0; r < world; ++r) total_weight += r % 3 + 1;
  std::vector<std::int64_t> lengths;
  std::int64_t used = 0, weight = 0;
  for (int r = 0; r < world; ++r) {
    weight += r % 3 + 1;
    const std::int64_t end = seqlen * weight / total_weight;
    lengths.push_back(end - used);
    used = end;
  }
  return SequenceShards::contiguous(lengths);
}

// A rank's local tensor: bytes poisoned with 0xff (NaN in f32, f16 and bf16).
struct Local {
  std::vector<std::uint8_t> bytes;
  TensorView view;
  Local() = default;
  Local(DType dtype, std::initializer_list<std::int64_t> shape) {
    std::int64_t n = 1;
    for (std::int64_t s : shape) n *= s;
    bytes.assign(static_cast<std::size_t>(n) * dtype_size(dtype), 0xff);
    view = make_tensor(bytes.data(), dtype, shape);
  }
};

struct RankTensors {
  Local q, k, v, dout, out, lse, dq, dk, dv;
};

struct RingRun {
  std::vector<harness::TensorCheck> checks;  // out, lse, dq, dk, dv
  distributed::RingReport forward, backward;
  std::string error;
};

enum class Mode { ring, ulysses };

RingRun run_ring(const harness::Case& c, int world_size, Layout q_layout, Layout kv_layout, bool overlap,
                 distributed::RingPartials partials = distributed::RingPartials::f32, Mode mode = Mode::ring) {
  RingRun run;
  harness::CaseData data(c);
  const AttentionProblem p = data.problem();
  const SequenceShards qs = make_shards(q_layout, c.seqlen_q, world_size), ks = make_shards(kv_layout, c.seqlen_k, world_size);
  std::vector<RankTensors> ranks(static_cast<std::size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    RankTensors& t = ranks[static_cast<std::size_t>(r)];
    const std::int64_t lq = qs.local_length(r), lk = ks.local_length(r);
    t.q = Local(c.dtype, {c.batch, lq, c.num_heads, c.head_dim});
    t.dout = Local(c.dtype, {c.batch, lq, c.num_heads, c.head_dim});
    t.out = Local(c.dtype, {c.batch, lq, c.num_heads, c.head_dim});
    t.dq = Local(c.dtype, {c.batch, lq, c.num_heads, c.head_dim});
    t.lse = Local(DType::f32, {c.batch, c.num_heads, lq});
    t.k = Local(c.dtype, {c.batch, lk, c.num_kv_heads, c.head_dim});
    t.v = Local(c.dtype, {c.batch, lk, c.num_kv_heads, c.head_dim});
    t.dk = Local(c.dtype, {c.batch, lk, c.num_kv_heads, c.head_dim});
    t.dv = Local(c.dtype, {c.batch, lk, c.num_kv_heads, c.head_dim});
    distributed::shard_tokens(qs, r, data.q.view(), t.q.view);
    distributed::shard_tokens(qs, r, data.dout.view(), t.dout.view);
    distributed::shard_tokens(ks, r, data.k.view(), t.k.view);
    distributed::shard_tokens(ks, r, data.v.view(), t.v.view);
  }
  distributed::RingOptions o;
  o.causal = c.causal;
  o.softmax_scale = c.scale();
  o.num_threads = 1;  // ranks are threads already
  o.overlap = overlap;
  o.partials = partials;
  auto rethrow_first = [&](const std::vector<std::exception_ptr>& errors) {
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);
  };
  try {
    // Forward.
    const reference::ForwardResult ref = reference::forward_f64(p);
    const harness::NaiveForward naive = harness::naive_forward(p);
    CpuWorld fwd_world(world_size);
    rethrow_first(fwd_world.run([&](Communicator& comm) {
      RankTensors& t = ranks[static_cast<std::size_t>(comm.rank())];
      const auto rep = mode == Mode::ring
                           ? distributed::ring_attention_forward(comm, qs, ks, t.q.view, t.k.view, t.v.view, t.out.view, t.lse.view, o)
                           : distributed::ulysses_attention_forward(comm, qs, ks, t.q.view, t.k.view, t.v.view, t.out.view, t.lse.view, o);
      if (comm.rank() == 0) run.forward = rep;
    }));
    data.out.fill_view_bits(harness::poison_bits(c.dtype));
    data.lse.fill_view_bits(harness::poison_bits(DType::f32));
    for (int r = 0; r < world_size; ++r) {
      distributed::unshard_tokens(qs, r, ranks[static_cast<std::size_t>(r)].out.view, data.out.view());
      distributed::unshard_lse(qs, r, ranks[static_cast<std::size_t>(r)].lse.view, data.lse.view());
    }
    run.checks.push_back(harness::judge_tensor("out", data.out, data.out.values(), ref.out, naive.out, naive.out_terms, c.dtype,
                                               c.head_dim, false));
    run.checks.push_back(harness::judge_tensor("lse", data.lse, data.lse_values(), ref.lse, naive.lse, naive.lse_terms, c.dtype,
                                               c.head_dim, true));

    // Backward, from the reference forward's out and lse.
    data.set_forward_outputs(ref.out, ref.lse);
    const reference::BackwardResult grad = reference::backward_f64(p);
    const harness::NaiveBackward nb = harness::naive_backward(p);
    for (int r = 0; r < world_size; ++r) {
      distributed::shard_tokens(qs, r, data.out.view(), ranks[static_cast<std::size_t>(r)].out.view);
      distributed::shard_lse(qs, r, data.lse.view(), ranks[static_cast<std::size_t>(r)].lse.view);
    }
    CpuWorld bwd_world(world_size);
    rethrow_first(bwd_world.run([&](Communicator& comm) {
      RankTensors& t = ranks[static_cast<std::size_t>(comm.rank())];
      const auto rep = mode == Mode::ring
                           ? distributed::ring_attention_backward(comm, qs, ks, t.dout.view, t.q.view, t.k.view, t.v.view,
                                                                  t.out.view, t.lse.view, t.dq.view, t.dk.view, t.dv.view, o)
                           : distributed::ulysses_attention_backward(comm, qs, ks, t.dout.view, t.q.view, t.k.view, t.v.view,
                                                                     t.out.view, t.lse.view, t.dq.view, t.dk.view, t.dv.view, o);
      if (comm.rank() == 0) run.backward = rep;
    }));
    for (harness::HostTensor* g : {&data.dq, &data.dk, &data.dv}) g->fill_view_bits(harness::poison_bits(c.dtype));
    for (int r = 0; r < world_size; ++r) {
      distributed::unshard_tokens(qs, r, ranks[static_cast<std::size_t>(r)].dq.view, data.dq.view());
      distributed::unshard_tokens(ks, r, ranks[static_cast<std::size_t>(r)].dk.view, data.dk.view());
      distributed::unshard_tokens(ks, r, ranks[static_cast<std::size_t>(r)].dv.view, data.dv.view());
    }
    run.checks.push_back(harness::judge_tensor("dq", data.dq, data.dq.values(), grad.dq, nb.dq, nb.dq_terms, c.dtype, c.head_dim, false));
    run.checks.push_back(harness::judge_tensor("dk", data.dk, data.dk.values(), grad.dk, nb.dk, nb.dk_terms, c.dtype, c.head_dim, false));
    run.checks.push_back(harness::judge_tensor("dv", data.dv, data.dv.values(), grad.dv, nb.dv, nb.dv_terms, c.dtype, c.head_dim, false));
  } catch (const std::exception& e) {
    run.error = e.what();
  }
  return run;
}

struct RingCase {
  const char* text;
  Layout q_layout, kv_layout;
};
void PrintTo(const RingCase& c, std::ostream* os) {
  *os << "'" << c.text << "' q " << (c.q_layout == Layout::zigzag ? "zigzag" : "uneven") << " kv "
      << (c.kv_layout == Layout::zigzag ? "zigzag" : "uneven");
}

// Causal self-attention (zigzag and uneven contiguous), GQA 2:1 and 4:1 and MQA, every dtype,
// non-causal cross-attention with different q and kv shardings, causal with sq < sk (the
// bottom-right offset crosses shard boundaries), and a sequence shorter than 2 x 8 chunks (zigzag
// ranks with empty chunks).
const RingCase kRingCases[] = {
    {"b=1 sq=67 sk=67 h=4 hkv=2 d=64 dtype=bf16 mask=causal", Layout::zigzag, Layout::zigzag},
    {"b=2 sq=50 sk=50 h=4 hkv=1 d=32 dtype=f32 mask=causal", Layout::uneven, Layout::uneven},
    {"b=1 sq=45 sk=70 h=2 hkv=2 d=64 dtype=f16 mask=none", Layout::uneven, Layout::zigzag},
    {"b=1 sq=40 sk=70 h=4 hkv=2 d=32 dtype=bf16 mask=causal", Layout::zigzag, Layout::uneven},
    {"b=1 sq=13 sk=13 h=2 hkv=1 d=64 dtype=f32 mask=causal", Layout::zigzag, Layout::zigzag},
    {"b=1 sq=64 sk=64 h=4 hkv=4 d=64 dtype=f16 mask=causal", Layout::zigzag, Layout::zigzag},
};

class RingAttention : public ::testing::TestWithParam<RingCase> {};

// RingPartials::f32 (the default): the standard rule at every world size, and neither the
// relative Frobenius nor the worst-row max-abs error exceeds 2 x the 1-rank ring's + the rule's
// floor. RingPartials::input_dtype: the standard rule and the Frobenius yardstick (its max-abs
// error takes up to about one more ulp per row from the rounded partials; docs/distributed.md).
TEST_P(RingAttention, MatchesFloat64AndErrorDoesNotGrowWithRanks) {
  const RingCase rc = GetParam();
  const harness::Case c = harness::parse_case(rc.text);
  for (distributed::RingPartials partials : {distributed::RingPartials::f32, distributed::RingPartials::input_dtype}) {
  const bool f32 = partials == distributed::RingPartials::f32;
  if (!f32 && c.dtype == DType::f32) continue;  // the same run
  std::vector<harness::TensorCheck> one_rank;
  for (int world : {1, 2, 3, 5, 8}) {
    const RingRun run = run_ring(c, world, rc.q_layout, rc.kv_layout, true, partials);
    ASSERT_TRUE(run.error.empty()) << world << " ranks: " << run.error;
    ASSERT_EQ(run.checks.size(), 5u);
    EXPECT_EQ(run.forward.steps, world);
    std::string line = std::to_string(world) + " ranks:";
    for (std::size_t i = 0; i < run.checks.size(); ++i) {
      const harness::TensorCheck& t = run.checks[i];
      EXPECT_TRUE(t.pass) << world << " ranks, " << ::testing::PrintToString(rc) << "\n" << t.to_string();
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s %.2e/%.2e", t.name.c_str(), t.backend.max_abs, t.backend.rel_fro);
      line += buf;
      if (world == 1) continue;
      // Against the 1-rank ring as the yardstick, with the rule's own floor (bound - 2 naive).
      const harness::TensorCheck& base = one_rank[i];
      const double floor_fro = t.bound.rel_fro - 2 * t.naive.rel_fro;
      EXPECT_LE(t.backend.rel_fro, 2 * base.backend.rel_fro + floor_fro)
          << t.name << ": error grew from 1 to " << world << " ranks: " << base.backend.rel_fro << " -> " << t.backend.rel_fro;
      if (f32) {
        const double floor_max = t.bound.max_abs - 2 * t.naive.max_abs;
        EXPECT_LE(t.backend.max_abs, 2 * base.backend.max_abs + floor_max)
            << t.name << ": max-abs error grew from 1 to " << world << " ranks: " << base.backend.max_abs << " -> " << t.backend.max_abs;
      }
    }
    if (world == 1) one_rank = run.checks;
    std::printf("[ ring ] %s partials=%s: %s\n", rc.text, f32 ? "f32" : "dtype", line.c_str());
  }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RingAttention, ::testing::ValuesIn(kRingCases));

// Ulysses all-to-all: num_heads and num_kv_heads divisible by the world size. One call over the
// whole sequence per rank, so the error is that of the 1-rank call at every world size (checked
// as for the ring: the standard rule, and 2 x the 1-rank error + floor).
const RingCase kUlyssesCases[] = {
    {"b=1 sq=67 sk=67 h=8 hkv=8 d=64 dtype=bf16 mask=causal", Layout::zigzag, Layout::zigzag},
    {"b=2 sq=45 sk=45 h=8 hkv=4 d=32 dtype=f32 mask=causal", Layout::uneven, Layout::uneven},
    {"b=1 sq=30 sk=50 h=8 hkv=8 d=64 dtype=f16 mask=none", Layout::uneven, Layout::zigzag},
};

class UlyssesAttention : public ::testing::TestWithParam<RingCase> {};

TEST_P(UlyssesAttention, MatchesFloat64AndErrorDoesNotGrowWithRanks) {
  const RingCase rc = GetParam();
  const harness::Case c = harness::parse_case(rc.text);
  std::vector<harness::TensorCheck> one_rank;
  for (int world : {1, 2, 4, 8}) {
    if (c.num_kv_heads % world != 0) continue;
    const RingRun run = run_ring(c, world, rc.q_layout, rc.kv_layout, true, distributed::RingPartials::f32, Mode::ulysses);
    ASSERT_TRUE(run.error.empty()) << world << " ranks: " << run.error;
    ASSERT_EQ(run.checks.size(), 5u);
    for (std::size_t i = 0; i < run.checks.size(); ++i) {
      const harness::TensorCheck& t = run.checks[i];
      EXPECT_TRUE(t.pass) << world << " ranks, " << ::testing::PrintToString(rc) << "\n" << t.to_string();
      if (world == 1) continue;
      const double floor_fro = t.bound.rel_fro - 2 * t.naive.rel_fro;
      EXPECT_LE(t.backend.rel_fro, 2 * one_rank[i].backend.rel_fro + floor_fro) << t.name << " at " << world << " ranks";
    }
    if (world == 1) one_rank = run.checks;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, UlyssesAttention, ::testing::ValuesIn(kUlyssesCases));

TEST(UlyssesAttentionErrors, HeadsMustDivideTheWorld) {
  CpuWorld world(2);
  std::vector<float> buf(4096);
  const SequenceShards s = SequenceShards::contiguous(10, 2);
  const TensorView q = make_tensor(buf.data(), DType::f32, {1, 5, 4, 8}), k = make_tensor(buf.data(), DType::f32, {1, 5, 1, 8});
  expect_error([&] { distributed::ulysses_attention_forward(world.communicator(0), s, s, q, k, k, q, std::nullopt); },
               ErrorCode::invalid_argument,
               "ulysses_attention_forward: k: expected shape[2] (num_kv_heads) divisible by the world size 2 (Ulysses splits KV heads; "
               "ring attention does not), got 1");
}

// The overlapped ring (a comm thread) and the sequential one compute the same calls in the same
// order: the same bits.
TEST(RingAttentionOverlap, SameBitsAsSequential) {
  const harness::Case c = harness::parse_case("b=1 sq=37 sk=37 h=4 hkv=2 d=32 dtype=bf16 mask=causal");
  const RingRun a = run_ring(c, 4, Layout::zigzag, Layout::zigzag, true), b = run_ring(c, 4, Layout::zigzag, Layout::zigzag, false);
  ASSERT_TRUE(a.error.empty() && b.error.empty()) << a.error << b.error;
  for (std::size_t i = 0; i < a.checks.size(); ++i) {
    EXPECT_EQ(a.checks[i].backend.max_abs, b.checks[i].backend.max_abs) << a.checks[i].name;
    EXPECT_EQ(a.checks[i].backend.rel_fro, b.checks[i].backend.rel_fro) << a.checks[i].name;
  }
  EXPECT_EQ(a.forward.block_calls, b.forward.block_calls);
}

TEST(RingShards, ZigzagAndContiguousPlans) {
  const SequenceShards z = SequenceShards::zigzag(16, 4);
  ASSERT_EQ(z.world_size(), 4);
  EXPECT_EQ(z.chunks[0][0].start, 0);
  EXPECT_EQ(z.chunks[0][1].start, 14);
  EXPECT_EQ(z.chunks[3][0].start, 6);
  EXPECT_EQ(z.chunks[3][1].start, 8);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(z.local_length(r), 4);
  const SequenceShards u = SequenceShards::contiguous(10, 3);
  EXPECT_EQ(u.local_length(0) + u.local_length(1) + u.local_length(2), 10);
  expect_error([] { SequenceShards::contiguous(std::vector<std::int64_t>{3, -1}); }, ErrorCode::invalid_argument,
               "SequenceShards::contiguous: lengths[1]: expected >= 0, got -1");
}

TEST(RingAttentionErrors, BadArgumentsNameTheArgument) {
  CpuWorld world(2);
  Communicator& comm = world.communicator(0);
  std::vector<float> buf(4096);
  const TensorView q = make_tensor(buf.data(), DType::f32, {1, 5, 2, 8}), k = make_tensor(buf.data(), DType::f32, {1, 5, 1, 8});
  const SequenceShards s = SequenceShards::contiguous(10, 2);
  SequenceShards holes = s;
  holes.chunks[1][0].start = 6;
  expect_error([&] { distributed::ring_attention_forward(comm, holes, s, q, k, k, q, std::nullopt); }, ErrorCode::invalid_argument,
               "ring_attention_forward: q_shards: expected chunks that cover [0, seqlen = 10) once");
  expect_error([&] { distributed::ring_attention_forward(comm, SequenceShards::contiguous(12, 2), s, q, k, k, q, std::nullopt); },
               ErrorCode::invalid_argument, "ring_attention_forward: q: expected shape[1] = this rank's 6 tokens of q_shards, got 5");
  expect_error([&] { distributed::ring_attention_forward(comm, s, s, q, make_tensor(buf.data(), DType::f32, {1, 5, 3, 8}), make_tensor(buf.data(), DType::f32, {1, 5, 3, 8}), q, std::nullopt); },
               ErrorCode::invalid_argument, "ring_attention_forward: k: expected shape[2] (num_kv_heads) to divide q.shape[2] = 2, got 3");
  expect_error([&] { distributed::ring_attention_forward(comm, s, s, q, k, k, q, make_tensor(buf.data(), DType::f32, {1, 2, 4})); },
               ErrorCode::invalid_argument, "ring_attention_forward: lse: expected an f32 CPU tensor [1, 2, 5]");
  expect_error([&] { distributed::ring_attention_forward(comm, SequenceShards::contiguous(10, 3), s, q, k, k, q, std::nullopt); },
               ErrorCode::invalid_argument, "q_shards: expected one entry of chunks per rank (2), got 3");
  std::vector<float> lse(64);
  expect_error([&] { distributed::ring_attention_backward(comm, s, s, q, q, k, k, q, make_tensor(lse.data(), DType::f32, {1, 2, 5}), q, k,
                                                         make_tensor(buf.data(), DType::f32, {1, 5, 2, 8})); },
               ErrorCode::invalid_argument, "ring_attention_backward: dv: expected shape [1, 5, 1, 8] (that of k), got [1, 5, 2, 8]");
  expect_error([&] { distributed::shard_tokens(s, 1, make_tensor(buf.data(), DType::f32, {1, 9, 2, 8}), q); },
               ErrorCode::invalid_argument, "shard_tokens: global: expected shape[1] = seqlen 10, got 9");
  // Nothing was communicated: the world is still usable.
  EXPECT_FALSE(comm.aborted());
}

// A rank that leaves after the first ring step (as if it died mid-call): every other rank gets
// an Error within about one timeout; none hangs.
TEST(RingAttentionFailure, RankLostMidRingFailsEveryOtherRank) {
  const harness::Case c = harness::parse_case("b=1 sq=40 sk=40 h=2 hkv=1 d=32 dtype=f32 mask=causal");
  harness::CaseData data(c);
  const int world_size = 4, lost = 2, timeout = 300;
  const SequenceShards s = SequenceShards::zigzag(c.seqlen_q, world_size);
  distributed::CommOptions co;
  co.timeout = std::chrono::milliseconds(timeout);
  CpuWorld world(world_size, co);
  const auto start = std::chrono::steady_clock::now();
  const auto errors = world.run([&](Communicator& comm) {
    const std::int64_t l = s.local_length(comm.rank());
    Local q(c.dtype, {1, l, 2, 32}), k(c.dtype, {1, l, 1, 32}), v(c.dtype, {1, l, 1, 32}), out(c.dtype, {1, l, 2, 32});
    distributed::shard_tokens(s, comm.rank(), data.q.view(), q.view);
    distributed::shard_tokens(s, comm.rank(), data.k.view(), k.view);
    distributed::shard_tokens(s, comm.rank(), data.v.view(), v.view);
    if (comm.rank() == lost) {  // one step's transfer, then gone
      Local recv(c.dtype, {2 * s.local_length((lost + world_size - 1) % world_size) * 32});
      Local send(c.dtype, {2 * l * 32});
      distributed::ring_shift(comm, send.view, recv.view);
      return;
    }
    distributed::RingOptions o;
    o.causal = true;
    o.num_threads = 1;
    distributed::ring_attention_forward(comm, s, s, q.view, k.view, v.view, out.view, std::nullopt, o);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, timeout / 1000.0 + 3.0);
  for (int r = 0; r < world_size; ++r) {
    if (r == lost) continue;
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " returned normally";
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::device_error) << e.what();
      EXPECT_NE(std::string(e.what()).find("distributed: rank " + std::to_string(r)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
