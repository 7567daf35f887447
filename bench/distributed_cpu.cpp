// distributed_cpu.cpp — overlap vs sequential on in-process CPU ranks (fastattn/distributed.hpp).
//
// CPU RANKS ONLY: every rank is a thread of this process, messages are memory copies, and all
// ranks share this machine's cores. The figures say how much of the communication the overlap
// hides when compute and copies contend for the same cores; they say nothing about GPUs or NCCL.
//
//   tiling-AllReduce  out = AllReduce(attn_out @ w_o), f32: the GEMM alone (no reduction), the
//                     all-reduce alone, sequential (all tiles, then one all-reduce), overlapped.
//   ring attention    forward + backward, causal, zigzag, bf16 inputs: overlap on and off.
// Each figure: the median of `repeats` runs after one warm-up; every rank runs with one compute
// thread. Usage: bench_distributed_cpu [ranks=2] [repeats=5]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "common/dtype.hpp"
#include "fastattn/distributed.hpp"

namespace fd = fastattn::distributed;
using fastattn::DType;
using fastattn::make_tensor;

namespace {

double median_seconds(int repeats, const std::function<void()>& fn) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Runs fn on `ranks` CPU ranks; throws the first rank's error.
void on_ranks(int ranks, const std::function<void(fd::Communicator&)>& fn) {
  fd::CpuWorld world(ranks);
  for (const auto& e : world.run(fn))
    if (e) std::rethrow_exception(e);
}

void fill(std::vector<std::uint8_t>& bytes, DType dtype, std::uint64_t seed) {
  const std::size_t n = bytes.size() / fastattn::dtype_size(dtype);
  std::uint64_t s = seed;
  for (std::size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    fastattn::store_element(bytes.data(), dtype, static_cast<std::int64_t>(i), static_cast<double>((s >> 33) % 2001) / 1000.0 - 1.0);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::printf("CPU ranks: %d (threads of one process), %d repeats, medians\n", ranks, repeats);

  {  // tiling-AllReduce
    const std::int64_t m = 1024, k = 256, n = 1024;
    std::vector<std::vector<std::uint8_t>> a(ranks), w(ranks), out(ranks);
    for (int r = 0; r < ranks; ++r) {
      a[r].resize(static_cast<std::size_t>(m * k) * 4);
      w[r].resize(static_cast<std::size_t>(k * n) * 4);
      out[r].resize(static_cast<std::size_t>(m * n) * 4);
      fill(a[r], DType::f32, 1 + r);
      fill(w[r], DType::f32, 100 + r);
    }
    auto run = [&](bool overlap, bool reduce, bool gemm) {
      on_ranks(ranks, [&](fd::Communicator& comm) {
        const int r = comm.rank();
        const auto av = make_tensor(a[r].data(), DType::f32, {m, k}), wv = make_tensor(w[r].data(), DType::f32, {k, n});
        const auto ov = make_tensor(out[r].data(), DType::f32, {m, n});
        fd::TilingAllReduceOptions o;
        o.num_threads = 1;
        o.overlap = overlap;
        if (gemm && reduce) {
          fd::matmul_all_reduce(comm, av, wv, ov, o);
        } else if (gemm) {  // the same tiles, no reduction: a world of one per rank
          fd::CpuWorld alone(1);
          fd::matmul_all_reduce(alone.communicator(0), av, wv, ov, o);
        } else {
          comm.all_reduce_sum(ov);
        }
      });
    };
    const double t_gemm = median_seconds(repeats, [&] { run(false, false, true); });
    const double t_reduce = median_seconds(repeats, [&] { run(false, true, false); });
    const double t_seq = median_seconds(repeats, [&] { run(false, true, true); });
    const double t_ovl = median_seconds(repeats, [&] { run(true, true, true); });
    std::printf("tiling-AllReduce f32 M=%lld K/rank=%lld N=%lld: gemm %.2f ms, all-reduce %.2f ms, sequential %.2f ms, "
                "overlapped %.2f ms (ideal max(gemm, all-reduce) %.2f ms)\n",
                static_cast<long long>(m), static_cast<long long>(k), static_cast<long long>(n), t_gemm * 1e3, t_reduce * 1e3,
                t_seq * 1e3, t_ovl * 1e3, std::max(t_gemm, t_reduce) * 1e3);
  }

  {  // ring attention forward + backward
    const std::int64_t seqlen = 2048, heads = 4, kv_heads = 2, dim = 64;
    const fd::SequenceShards shards = fd::SequenceShards::zigzag(seqlen, ranks);
    struct Rank {
      std::vector<std::uint8_t> q, k, v, dout, out, dq, dk, dv;
      std::vector<float> lse;
    };
    std::vector<Rank> rs(ranks);
    for (int r = 0; r < ranks; ++r) {
      const std::size_t l = static_cast<std::size_t>(shards.local_length(r));
      Rank& x = rs[r];
      for (auto* b : {&x.q, &x.dout, &x.out, &x.dq}) b->resize(l * heads * dim * 2);
      for (auto* b : {&x.k, &x.v, &x.dk, &x.dv}) b->resize(l * kv_heads * dim * 2);
      x.lse.resize(l * heads);
      fill(x.q, DType::bf16, 7 + r);
      fill(x.k, DType::bf16, 17 + r);
      fill(x.v, DType::bf16, 27 + r);
      fill(x.dout, DType::bf16, 37 + r);
    }
    for (fd::RingPartials partials : {fd::RingPartials::f32, fd::RingPartials::input_dtype}) {
      auto run = [&](bool overlap) {
        on_ranks(ranks, [&](fd::Communicator& comm) {
          Rank& x = rs[comm.rank()];
          const std::int64_t l = shards.local_length(comm.rank());
          auto qv = [&](std::vector<std::uint8_t>& b) { return make_tensor(b.data(), DType::bf16, {1, l, heads, dim}); };
          auto kvv = [&](std::vector<std::uint8_t>& b) { return make_tensor(b.data(), DType::bf16, {1, l, kv_heads, dim}); };
          const auto lse = make_tensor(x.lse.data(), DType::f32, {1, heads, l});
          fd::RingOptions o;
          o.causal = true;
          o.num_threads = 1;
          o.overlap = overlap;
          o.partials = partials;
          fd::ring_attention_forward(comm, shards, shards, qv(x.q), kvv(x.k), kvv(x.v), qv(x.out), lse, o);
          fd::ring_attention_backward(comm, shards, shards, qv(x.dout), qv(x.q), kvv(x.k), kvv(x.v), qv(x.out), lse, qv(x.dq),
                                      kvv(x.dk), kvv(x.dv), o);
        });
      };
      const double t_seq = median_seconds(repeats, [&] { run(false); });
      const double t_ovl = median_seconds(repeats, [&] { run(true); });
      std::printf("ring attention fwd+bwd causal zigzag bf16 S=%lld H=%lld Hkv=%lld D=%lld partials=%s: sequential %.2f ms, "
                  "overlapped %.2f ms\n",
                  static_cast<long long>(seqlen), static_cast<long long>(heads), static_cast<long long>(kv_heads),
                  static_cast<long long>(dim), partials == fd::RingPartials::f32 ? "f32" : "bf16", t_seq * 1e3, t_ovl * 1e3);
    }
  }
  return 0;
}
