// determinism_test.cpp — options.deterministic: repeated calls are bitwise equal.
//
// The CPU forward pass gives every output row to exactly one thread, so it is reproducible
// across repeats and thread counts. The deterministic backward sums every dQ row in an order
// fixed by the problem and the thread count (src/cpu/backward.cpp: owner mode, round-robin
// split mode or concurrent split mode), so repeats with the same thread count are bitwise equal;
// different thread counts may choose different modes and are not promised to agree bitwise.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

using harness::Case;
using harness::CaseData;
using harness::HostTensor;

std::vector<std::uint32_t> bits_of(const HostTensor& t) {
  std::vector<std::uint32_t> b(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) b[static_cast<std::size_t>(i)] = t.bits(i);
  return b;
}

struct Gradients {
  std::vector<std::uint32_t> dq, dk, dv;
  bool operator==(const Gradients& o) const { return dq == o.dq && dk == o.dk && dv == o.dv; }
};

// Runs the CPU backward of `c` (fed the reference forward) with `threads` threads.
Gradients cpu_gradients(const Case& c, int threads) {
  Case with_threads = c;
  with_threads.num_threads = threads;
  CaseData data(with_threads);
  const reference::ForwardResult f = reference::forward_f64(data.problem());
  data.set_forward_outputs(f.out, f.lse);
  data.run_backward(Backend::cpu);
  return {bits_of(data.dq), bits_of(data.dk), bits_of(data.dv)};
}

// Cases where several key blocks (and so several threads) add into the same dQ rows: long key
// sequences, GQA groups, varlen.
const char* const kCases[] = {
    "b=1 sq=200 sk=600 h=2 hkv=1 d=64 dtype=f32 mask=none det=1 seed=41",
    "b=2 sq=130 sk=300 h=4 hkv=2 d=32 dtype=bf16 mask=causal align=top_left det=1 seed=42",
    "lens_q=90,0,150 lens_k=300,7,260 h=2 hkv=2 d=64 dtype=f16 mask=window wl=100 wr=20 det=1 "
    "layout=strided seed=43",
    // 2 groups: 3 threads run the concurrent split mode (both groups at once, 2 splits each).
    "b=2 sq=150 sk=400 h=2 hkv=1 d=64 dtype=bf16 mask=causal det=1 seed=44",
};

class Determinism : public ::testing::TestWithParam<const char*> {};

TEST_P(Determinism, BackwardRepeatsAreBitwiseEqual) {
  const Case c = harness::parse_case(GetParam());
  // 1 thread; 2 and 3 threads reach both the owner and the split mode of the backward plan.
  for (int threads : {1, 2, 3}) {
    const Gradients first = cpu_gradients(c, threads);
    for (int repeat = 0; repeat < 2; ++repeat)
      EXPECT_TRUE(cpu_gradients(c, threads) == first)
          << threads << " threads, repeat " << repeat << ": " << c.to_string();
  }
}

TEST_P(Determinism, ForwardIsBitwiseReproducible) {
  Case c = harness::parse_case(GetParam());
  std::vector<std::uint32_t> out_first, lse_first;
  for (int threads : {1, 2, 3}) {
    c.num_threads = threads;
    for (int repeat = 0; repeat < 2; ++repeat) {
      CaseData data(c);
      data.run_forward(Backend::cpu);
      if (out_first.empty()) {
        out_first = bits_of(data.out);
        lse_first = bits_of(data.lse);
        continue;
      }
      EXPECT_TRUE(bits_of(data.out) == out_first) << threads << " threads: " << c.to_string();
      EXPECT_TRUE(bits_of(data.lse) == lse_first) << threads << " threads: " << c.to_string();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Determinism, ::testing::ValuesIn(kCases));

}  // namespace
}  // namespace fastattn::testing
