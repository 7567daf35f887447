// distributed_tiling_test.cpp — tiling-AllReduce on CPU ranks (fastattn/distributed.hpp:
// matmul_all_reduce, tiled_all_reduce): out = sum over ranks of attn_out_r @ w_o_r against a
// float64 product of the unsplit matrices, on 1-8 ranks, f32 / bf16 / f16, odd sizes; overlapped
// and sequential give the same bits; a producer that throws on one rank fails every rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "fastattn/distributed.hpp"
#include "harness/judge.hpp"
#include "harness/random.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using distributed::Communicator;
using distributed::CpuWorld;
using distributed::TilingAllReduceOptions;
using distributed::TilingAllReduceReport;

struct TpProblem {
  std::int64_t m, k_per_rank, n;
  int world;
  DType dtype;
  std::vector<std::vector<std::uint8_t>> a, w;  // per rank: [M, K] and [K, N] in the dtype
};

TpProblem make_problem(std::int64_t m, std::int64_t k, std::int64_t n, int world, DType dtype) {
  TpProblem p{m, k, n, world, dtype, {}, {}};
  harness::Random rng(77 + static_cast<std::uint64_t>(world));
  const std::size_t elem = dtype_size(dtype);
  for (int r = 0; r < world; ++r) {
    p.a.emplace_back(static_cast<std::size_t>(m * k) * elem);
    p.w.emplace_back(static_cast<std::size_t>(k * n) * elem);
    for (std::int64_t i = 0; i < m * k; ++i) store_element(p.a.back().data(), dtype, i, rng.normal());
    for (std::int64_t i = 0; i < k * n; ++i) store_element(p.w.back().data(), dtype, i, rng.normal() / std::sqrt(double(k)));
  }
  return p;
}

// Runs matmul_all_reduce on every rank; returns each rank's out (dtype bytes).
std::vector<std::vector<std::uint8_t>> run_tp(TpProblem& p, const TilingAllReduceOptions& o, TilingAllReduceReport* report = nullptr) {
  std::vector<std::vector<std::uint8_t>> out(static_cast<std::size_t>(p.world),
                                             std::vector<std::uint8_t>(static_cast<std::size_t>(p.m * p.n) * dtype_size(p.dtype), 0xff));
  CpuWorld world(p.world);
  const auto errors = world.run([&](Communicator& comm) {
    const std::size_t r = static_cast<std::size_t>(comm.rank());
    const TilingAllReduceReport rep = distributed::matmul_all_reduce(
        comm, make_tensor(p.a[r].data(), p.dtype, {p.m, p.k_per_rank}), make_tensor(p.w[r].data(), p.dtype, {p.k_per_rank, p.n}),
        make_tensor(out[r].data(), p.dtype, {p.m, p.n}), o);
    if (r == 0 && report) *report = rep;
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

class TilingAllReduce : public ::testing::TestWithParam<std::tuple<int, DType>> {};

// Error vs float64 <= 2 x that of the naive pipeline (each rank's f32 product rounded to the
// dtype, summed in f32, rounded) + eps(dtype) |ref| + 4 sqrt(K) eps(f32) |terms| (harness.hpp's
// rule for a K-long dot product); every rank bitwise equal; overlap on and off bitwise equal.
TEST_P(TilingAllReduce, MatchesFloat64OnEveryRank) {
  const auto [world_size, dtype] = GetParam();
  TpProblem p = make_problem(67, 24, 40, world_size, dtype);
  TilingAllReduceOptions o;
  o.num_threads = 1;
  TilingAllReduceReport report;
  const auto overlapped = run_tp(p, o, &report);
  EXPECT_TRUE(report.overlapped);
  EXPECT_EQ(report.num_tiles, (67 + report.tile_rows - 1) / report.tile_rows);
  EXPECT_GT(report.num_tiles, 1);
  o.overlap = false;
  const auto sequential = run_tp(p, o);
  o.overlap = true;
  o.tile_rows = 1;
  const auto row_tiles = run_tp(p, o);
  for (int r = 0; r < world_size; ++r) {
    EXPECT_EQ(overlapped[static_cast<std::size_t>(r)], overlapped[0]) << "rank " << r;
    EXPECT_EQ(sequential[static_cast<std::size_t>(r)], overlapped[0]) << "rank " << r << " sequential";
    EXPECT_EQ(row_tiles[static_cast<std::size_t>(r)], overlapped[0]) << "rank " << r << " 1-row tiles";
  }
  const double eps = harness::epsilon(dtype), eps32 = 0x1.0p-23;
  double err = 0, naive_err = 0, floor = 0;
  for (std::int64_t i = 0; i < p.m; ++i)
    for (std::int64_t c = 0; c < p.n; ++c) {
      double ref = 0, terms = 0;
      float naive = 0;
      for (int r = 0; r < world_size; ++r) {
        double part = 0;
        float part32 = 0;
        for (std::int64_t j = 0; j < p.k_per_rank; ++j) {
          const double x = load_element(p.a[static_cast<std::size_t>(r)].data(), dtype, i * p.k_per_rank + j) *
                           load_element(p.w[static_cast<std::size_t>(r)].data(), dtype, j * p.n + c);
          part += x;
          terms += std::fabs(x);
          part32 += static_cast<float>(x);
        }
        ref += part;
        std::uint8_t part_bytes[4];  // the rank's partial as its out buffer holds it
        store_element(part_bytes, dtype, 0, part32);
        naive += static_cast<float>(load_element(part_bytes, dtype, 0));
      }
      std::uint8_t naive_bytes[4];
      store_element(naive_bytes, dtype, 0, naive);
      const double got = load_element(overlapped[0].data(), dtype, i * p.n + c);
      err = std::fmax(err, std::fabs(got - ref));
      naive_err = std::fmax(naive_err, std::fabs(load_element(naive_bytes, dtype, 0) - ref));
      floor = std::fmax(floor, eps * std::fabs(ref) + 4 * std::sqrt(double(p.k_per_rank * world_size)) * eps32 * terms);
    }
  EXPECT_LE(err, 2 * naive_err + floor) << "naive " << naive_err << " floor " << floor;
}

INSTANTIATE_TEST_SUITE_P(Ranks, TilingAllReduce,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 8), ::testing::Values(DType::f32, DType::bf16, DType::f16)));

TEST(TilingAllReduceEdges, EmptyAndSingleRowOutputs) {
  for (std::int64_t m : {0, 1}) {
    TpProblem p = make_problem(m, 5, 3, 2, DType::f32);
    TilingAllReduceReport report;
    const auto out = run_tp(p, {}, &report);
    EXPECT_EQ(report.num_tiles, m);
    EXPECT_EQ(out[0], out[1]);
  }
}

TEST(TilingAllReduceEdges, BadArgumentsNameTheArgument) {
  CpuWorld world(1);
  Communicator& comm = world.communicator(0);
  std::vector<float> a(12), w(12), out(16);
  expect_error([&] { distributed::matmul_all_reduce(comm, make_tensor(a.data(), DType::f32, {4, 3}), make_tensor(w.data(), DType::f32, {4, 3}), make_tensor(out.data(), DType::f32, {4, 3})); },
               ErrorCode::invalid_argument, "matmul_all_reduce: w_o: expected shape[0] = attn_out.shape[1] = 3, got 4");
  expect_error([&] { distributed::matmul_all_reduce(comm, make_tensor(a.data(), DType::f32, {4, 3}), make_tensor(w.data(), DType::f32, {3, 4}), make_tensor(out.data(), DType::f32, {4, 3})); },
               ErrorCode::invalid_argument, "matmul_all_reduce: out: expected shape [4, 4], got [4, 3]");
  expect_error([&] { distributed::matmul_all_reduce(comm, make_tensor(a.data(), DType::f32, {4, 3}), make_tensor(w.data(), DType::bf16, {3, 4}), make_tensor(out.data(), DType::f32, {4, 4})); },
               ErrorCode::invalid_argument, "matmul_all_reduce: w_o: expected dtype f32 (that of attn_out), got bf16");
  TilingAllReduceOptions o;
  o.tile_rows = -2;
  expect_error([&] { distributed::tiled_all_reduce(comm, make_tensor(out.data(), DType::f32, {4, 4}), [](std::int64_t, std::int64_t) {}, o); },
               ErrorCode::invalid_argument, "options.tile_rows: expected >= 0 (0: chosen), got -2");
  expect_error([&] { distributed::tiled_all_reduce(comm, make_tensor(out.data(), DType::f32, {4, 4}, Device::cuda(0)), [](std::int64_t, std::int64_t) {}); },
               ErrorCode::invalid_argument, "tiled_all_reduce: out: expected a tensor on the communicator's device cpu");
}

// The paper's form: each tile is the attention of a query-row block (this rank's heads) followed
// by its output projection, so the all-reduce of block t overlaps the attention of block t + 1.
// Tensor parallelism over heads: rank r holds heads [r H/P, (r+1) H/P) and the matching rows of
// W_o. Checked against float64 attention over all heads and the whole W_o (f32: relative
// Frobenius error within 1e-5), and overlapped == sequential bitwise.
TEST(TilingAllReduceAttention, QueryBlocksOverlapTheirAllReduce) {
  const std::int64_t seq = 70, heads = 4, dim = 16, n = 24;
  harness::Random rng(9);
  std::vector<float> q(seq * heads * dim), k(q.size()), v(q.size()), w(heads * dim * n);
  for (float* x : {q.data(), k.data(), v.data()})
    for (std::size_t i = 0; i < q.size(); ++i) x[i] = static_cast<float>(rng.normal());
  for (float& x : w) x = static_cast<float>(rng.normal() / 8);
  // float64: attention (all heads, softmax scale 1/sqrt(dim)) then the projection.
  std::vector<double> attn(static_cast<std::size_t>(seq * heads * dim), 0.0), ref(static_cast<std::size_t>(seq * n), 0.0);
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t i = 0; i < seq; ++i) {
      std::vector<double> s(static_cast<std::size_t>(seq));
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j < seq; ++j) {
        double d = 0;
        for (std::int64_t c = 0; c < dim; ++c) d += double(q[(i * heads + h) * dim + c]) * k[(j * heads + h) * dim + c];
        s[static_cast<std::size_t>(j)] = d / std::sqrt(double(dim));
        mx = std::max(mx, s[static_cast<std::size_t>(j)]);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (std::int64_t j = 0; j < seq; ++j)
        for (std::int64_t c = 0; c < dim; ++c)
          attn[static_cast<std::size_t>((i * heads + h) * dim + c)] += s[static_cast<std::size_t>(j)] / sum * v[(j * heads + h) * dim + c];
    }
  for (std::int64_t i = 0; i < seq; ++i)
    for (std::int64_t f = 0; f < heads * dim; ++f)
      for (std::int64_t c = 0; c < n; ++c) ref[static_cast<std::size_t>(i * n + c)] += attn[static_cast<std::size_t>(i * heads * dim + f)] * w[f * n + c];
  for (int world : {1, 2, 4}) {
    std::vector<std::vector<float>> outs;
    for (bool overlap : {true, false}) {
      std::vector<std::vector<float>> out(static_cast<std::size_t>(world), std::vector<float>(static_cast<std::size_t>(seq * n)));
      CpuWorld cw(world);
      const auto errors = cw.run([&](Communicator& comm) {
        const std::int64_t hr = heads / world, h0 = comm.rank() * hr;
        // This rank's heads of q, k, v as strided views; its attention rows and W_o rows.
        auto heads_view = [&](std::vector<float>& t) {
          return make_tensor(t.data() + h0 * dim, DType::f32, {1, seq, hr, dim}, {seq * heads * dim, heads * dim, dim, 1});
        };
        std::vector<float> block(static_cast<std::size_t>(seq * hr * dim));
        std::vector<float>& o = out[static_cast<std::size_t>(comm.rank())];
        TilingAllReduceOptions opts;
        opts.overlap = overlap;
        opts.tile_rows = 16;
        distributed::tiled_all_reduce(comm, make_tensor(o.data(), DType::f32, {seq, n}), [&](std::int64_t r0, std::int64_t r1) {
          AttentionOptions ao;
          ao.num_threads = 1;
          ao.backend = Backend::cpu;
          TensorView qv = heads_view(q);
          qv.data = static_cast<float*>(qv.data) + r0 * heads * dim;
          qv.shape[1] = r1 - r0;
          forward(qv, heads_view(k), heads_view(v), make_tensor(block.data() + r0 * hr * dim, DType::f32, {1, r1 - r0, hr, dim}),
                  std::nullopt, ao);
          for (std::int64_t i = r0; i < r1; ++i)
            for (std::int64_t c = 0; c < n; ++c) {
              float acc = 0;
              for (std::int64_t f = 0; f < hr * dim; ++f) acc += block[static_cast<std::size_t>(i * hr * dim + f)] * w[(h0 * dim + f) * n + c];
              o[static_cast<std::size_t>(i * n + c)] = acc;
            }
        }, opts);
      });
      for (const auto& e : errors) ASSERT_FALSE(e);
      for (int r = 1; r < world; ++r) EXPECT_EQ(out[static_cast<std::size_t>(r)], out[0]);
      outs.push_back(out[0]);
    }
    EXPECT_EQ(outs[0], outs[1]) << world << " ranks: overlapped and sequential differ";
    double num = 0, den = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      num += (outs[0][i] - ref[i]) * (outs[0][i] - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-5) << world << " ranks";
  }
}

// The general form, with a producer that fails on one rank mid-way (overlapped and not): every
// rank returns an error, quickly, and no rank hangs.
TEST(TilingAllReduceFailure, ThrowingProducerFailsEveryRank) {
  for (bool overlap : {true, false}) {
    distributed::CommOptions co;
    co.timeout = std::chrono::milliseconds(20'000);
    CpuWorld world(4, co);
    const auto start = std::chrono::steady_clock::now();
    const auto errors = world.run([&](Communicator& comm) {
      std::vector<float> out(64 * 8, 1.0f);
      TilingAllReduceOptions o;
      o.overlap = overlap;
      o.tile_rows = 8;
      distributed::tiled_all_reduce(comm, make_tensor(out.data(), DType::f32, {64, 8}), [&](std::int64_t begin, std::int64_t) {
        if (comm.rank() == 2 && begin == 24) throw Error(ErrorCode::internal, "injected producer failure");
      }, o);
    });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
    for (int r = 0; r < 4; ++r) EXPECT_TRUE(errors[static_cast<std::size_t>(r)]) << "rank " << r << " overlap " << overlap;
  }
}

}  // namespace
}  // namespace fastattn::testing
