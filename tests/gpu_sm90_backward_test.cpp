// gpu_sm90_backward_test.cpp — the Hopper backward (src/cuda/flash_bwd_sm90, issue 16), ctest
// label `gpu`. Skipped unless the device's path is sm90 (a build with FASTATTN_CUDA_ARCHS
// containing 90, on a compute capability 9.0 GPU). The fixture sets FASTATTN_CUDA_BWD_SM90=1
// (flash_bwd_sm90/plan.hpp: kSm90BackwardDefault, sm90 since it was measured).
//
//   * gradients (dq, dk, dv) against float64 on odd shapes: seqlen 1, 17, 1023; seqlen_q !=
//     seqlen_k both ways with causal / window masks in which whole query rows see no key (their
//     dq must be 0, no NaN: the harness poisons outputs and fails NaN) and key blocks no query
//     sees (dk = dv = 0); GQA 7:1; causal in both alignments; windows; soft-cap; negative scale;
//     both dtypes, d = 64 and 128 (the default dQ mode, plan.hpp sm90_dq_default); the backward
//     kernel must be the sm90 one;
//   * the same with each dQ mode forced: the bulk reduce-add (FASTATTN_CUDA_SM90_BWD_DQ=bulk),
//     red.global.add.v4 into the same tile-ordered accumulator (atomic_tiles) and
//     red.global.add.v2 into [tokens][heads][d] (atomic);
//   * deterministic mode (every dQ reduction): right, and bitwise repeatable over 10 runs;
//     each of its orders (FASTATTN_CUDA_SM90_BWD_ORDER: the default, one group of all pairs,
//     head-major, shortest first, groups of 3 pairs);
//   * paths those leave out (seqlen 4097, causal with seqlen_q and seqlen_k far apart, GQA
//     16:1 and several KV heads, one-sided windows, soft-cap with causal/GQA), also
//     deterministic; rows that see no key / keys no query sees give exactly zero gradients;
//   * calls it does not serve (not opted in, head dims without a unit; varlen when
//     kSm90BackwardVarlen is sm80) run the sm80 backward and the reason says why.
//
// Varlen batches and d = 96 / 256: gpu_sm90_backward_varlen_dims_test.cpp; the fixture and the
// two checks both files use: gpu_sm90_backward_support.hpp.
#include <gtest/gtest.h>

#if defined(FASTATTN_TESTS_CUDA) && FASTATTN_TESTS_CUDA
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/flash_bwd_sm90/plan.hpp"
#include "gpu_sm90_backward_support.hpp"
#include "harness/harness.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

// The odd shapes for one head dim and dtype.
std::vector<std::string> odd_shapes(int d, const char* dtype) {
  const std::string t = " d=" + std::to_string(d) + " dtype=" + dtype;
  return {
      "b=1 sq=1 sk=1 h=2 hkv=2" + t + " mask=none",
      "b=2 sq=1 sk=777 h=4 hkv=2" + t + " mask=none",
      "b=2 sq=17 sk=17 h=3 hkv=3" + t + " mask=none",
      "b=1 sq=17 sk=300 h=2 hkv=1" + t + " mask=causal align=bottom_right",
      "b=1 sq=1023 sk=1023 h=2 hkv=1" + t + " mask=causal",
      "b=1 sq=1023 sk=1023 h=1 hkv=1" + t + " mask=causal align=bottom_right",
      "b=1 sq=1023 sk=1023 h=2 hkv=2" + t + " mask=none",
      // seqlen_q > seqlen_k, bottom-right causal: the first 235 query rows see no key (dq = 0).
      "b=2 sq=300 sk=65 h=2 hkv=2" + t + " mask=causal align=bottom_right",
      // top-left, seqlen_q < seqlen_k: keys past the last query's diagonal are seen by no query
      // (whole key blocks with dk = dv = 0).
      "b=1 sq=65 sk=1000 h=2 hkv=2" + t + " mask=causal align=top_left",
      "b=2 sq=300 sk=65 h=2 hkv=1" + t + " mask=causal align=top_left",
      // A window that misses every key of some rows, and one that cuts both sides.
      "b=1 sq=500 sk=200 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right",
      "b=1 sq=257 sk=513 h=3 hkv=1" + t + " mask=window wl=40 wr=7 softcap=30",
      "b=1 sq=129 sk=700 h=2 hkv=2" + t + " mask=window wl=100",
      "b=2 sq=200 sk=333 h=7 hkv=1" + t + " mask=none",          // GQA 7:1
      "b=1 sq=300 sk=300 h=7 hkv=1" + t + " mask=causal",        // GQA 7:1, causal
      "b=1 sq=200 sk=333 h=2 hkv=1" + t + " mask=causal scale=-0.09",
      "b=1 sq=129 sk=1031 h=2 hkv=2" + t + " mask=none softcap=20",
      "b=1 sq=256 sk=256 h=2 hkv=2" + t + " mask=none qk_std=4",  // large logits
      // 128 (batch, KV head) pairs, causal: longest first in groups of 4 pairs (plan.hpp
      // sm90_tile_group), the last group full; the head-major order before the twenty-fourth session.
      "b=8 sq=130 sk=260 h=32 hkv=16" + t + " mask=causal align=bottom_right",
  };
}

TEST_F(CudaSm90Backward, OddShapesMatchFloat64) {
  for (int d : dims_) {
    for (const char* dtype : {"bf16", "f16"}) {
      for (const std::string& text : odd_shapes(d, dtype)) expect_sm90_backward(text);
    }
  }
}

// The dQ tiles through the TMA unit's bulk reduce-add instead of red.global.add, and by
// red.global.add.v4 into the same tile-ordered accumulator (dq_writer.cuh).
TEST_F(CudaSm90Backward, BulkReduceDqMatchesFloat64) {
  const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
  for (int d : dims_) {
    for (const std::string& text : odd_shapes(d, "bf16")) expect_sm90_backward(text);
  }
}
// atomic dQ (red.global.add.v2 into [tokens][heads][d]) is no longer d = 64 / 128's default
// (plan.hpp sm90_dq_default), so it is forced here on the odd shapes.
TEST_F(CudaSm90Backward, AtomicDqMatchesFloat64) {
  const ScopedEnv atomic("FASTATTN_CUDA_SM90_BWD_DQ", std::string("atomic"));
  for (int d : dims_) {
    for (const std::string& text : odd_shapes(d, "bf16")) expect_sm90_backward(text);
  }
}
// The grouped tile order (plan.hpp sm90_tile_group; forced here, with windows too, in groups of
// 4 and 8 (batch, KV head) pairs): 15 and 18 pairs, so the last group is partial; causal both
// ways, GQA and a sliding window. Passed on an H100 (twenty-fourth session).
TEST_F(CudaSm90Backward, GroupedOrderMatchesFloat64) {
  const ScopedEnv grouped("FASTATTN_CUDA_SM90_BWD_ORDER", std::string("grouped"));
  for (const char* group_pairs : {"4", "8"}) {
    const ScopedEnv pairs("FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS", std::string(group_pairs));
    for (int d : dims_) {
      const std::string t = " d=" + std::to_string(d) + " dtype=bf16";
      for (const std::string& text : {"b=3 sq=300 sk=700 h=5 hkv=5" + t + " mask=causal align=bottom_right",
                                      "b=3 sq=257 sk=257 h=10 hkv=5" + t + " mask=causal",
                                      "b=2 sq=200 sk=333 h=27 hkv=9" + t + " mask=causal align=bottom_right",
                                      "b=2 sq=400 sk=400 h=9 hkv=9" + t + " mask=window wl=100 wr=0"}) {
        expect_sm90_backward(text);
      }
    }
  }
}
TEST_F(CudaSm90Backward, AtomicTilesDqMatchesFloat64) {
  const ScopedEnv tiles("FASTATTN_CUDA_SM90_BWD_DQ", std::string("atomic_tiles"));
  for (int d : dims_) {
    for (const std::string& text : odd_shapes(d, "f16")) expect_sm90_backward(text);
  }
}

// A few small sm90 calls (every mask kind, GQA, soft-cap, both dtypes, every dQ reduction,
// deterministic): the set compute-sanitizer's memcheck and racecheck run
// (tools/dev/gpu-sm90-bwd.sh).
TEST_F(CudaSm90Backward, SmallShapesMatchFloat64) {
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : dims_) {
      const std::string hd = " d=" + std::to_string(d);
      expect_sm90_backward("b=1 sq=17 sk=300 h=2 hkv=1" + hd + " dtype=bf16 mask=none");
      expect_sm90_backward("b=1 sq=300 sk=65 h=2 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right det=1");
      expect_sm90_backward("b=1 sq=257 sk=513 h=2 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    }
  }
}

// Deterministic mode: right, and the same bits in 10 runs, with every dQ reduction; causal GQA
// (the semaphores' ranks start at each query block's first key block), a window, and groups of pairs.
TEST_F(CudaSm90Backward, DeterministicIsBitwiseRepeatable) {
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : dims_) {
      const std::string hd = " d=" + std::to_string(d);
      for (const std::string& text : {"b=2 sq=700 sk=900 h=4 hkv=2" + hd + " dtype=bf16 mask=causal det=1",
                                      "b=1 sq=1023 sk=1023 h=7 hkv=1" + hd + " dtype=f16 mask=causal det=1",
                                      "b=1 sq=600 sk=800 h=2 hkv=2" + hd + " dtype=bf16 mask=window wl=130 wr=20 det=1",
                                      "b=1 sq=512 sk=2048 h=4 hkv=4" + hd + " dtype=bf16 mask=none det=1",
                                      // 9 (batch, KV head) pairs: groups of 4, 4 and 1 (plan.hpp sm90_tile_group)
                                      "b=3 sq=300 sk=500 h=6 hkv=3" + hd + " dtype=bf16 mask=none det=1"}) {
        expect_sm90_backward(text);
        expect_bitwise_repeatable(text, std::string(dq) + " ");
      }
    }
  }
}

// Random cases of the backward suites' generator (varlen and strided views included where the
// generator draws them): whatever path each takes, it must be right; most take sm90.
TEST_F(CudaSm90Backward, RandomCasesMatchFloat64) {
  harness::CaseLimits l;
  l.dtypes = {DType::f16, DType::bf16};
  for (int d : dims_) l.head_dims.push_back(d);
  l.allow_strided = false;
  l.allow_long = true;
  int sm90 = 0;
  for (std::uint64_t seed = 301; seed <= 360; ++seed) {
    const harness::Case c = harness::random_case(seed, l);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda);
    EXPECT_TRUE(r.pass) << "seed " << seed << "\n" << r.to_string();
    sm90 += r.backward_choice.isa == "sm90";
  }
  EXPECT_GT(sm90, 10);
}

// Paths the shapes above leave out (issue-16 review): seqlen 4097 (33 query blocks, a
// partial last one); causal with seqlen_q != seqlen_k far apart both ways (thousands of query rows that
// see no key; key blocks no query sees, whose CTAs load nothing); GQA with 16 query heads per
// KV head and with several KV heads and batches (the tile index's (n, kv head, batch) decode);
// right-bounded and left-bounded windows alone (the two longest-first orders), the diagonal
// only, and windows wider than a block; soft-cap with causal and GQA; seqlen 1 against long.
std::vector<std::string> uncovered_shapes(int d, const char* dtype) {
  const std::string t = " d=" + std::to_string(d) + " dtype=" + dtype;
  return {
      "b=1 sq=4097 sk=1023 h=1 hkv=1" + t + " mask=causal",  // 33 query blocks over 8 key blocks
      "b=1 sq=4097 sk=17 h=2 hkv=2" + t + " mask=causal align=bottom_right",  // 4080 rows see no key
      "b=1 sq=17 sk=4097 h=2 hkv=2" + t + " mask=causal align=top_left",      // 31 key blocks unseen
      "b=1 sq=1 sk=4097 h=4 hkv=1" + t + " mask=causal",                       // one row sees all
      "b=2 sq=4097 sk=1 h=2 hkv=1" + t + " mask=causal align=bottom_right",    // only the last row sees
      "b=2 sq=129 sk=257 h=32 hkv=2" + t + " mask=causal",                     // GQA 16:1
      "b=3 sq=200 sk=200 h=32 hkv=8" + t + " mask=none",                       // GQA 4:1, 8 KV heads
      "b=2 sq=1023 sk=700 h=6 hkv=3" + t + " mask=causal align=top_left softcap=25",
      "b=2 sq=700 sk=300 h=4 hkv=2" + t + " mask=window wl=50 align=bottom_right softcap=15",
      "b=1 sq=600 sk=900 h=2 hkv=2" + t + " mask=window wr=30",  // right-bounded only
      "b=1 sq=333 sk=333 h=2 hkv=1" + t + " mask=window wl=0 wr=0",
      "b=1 sq=1000 sk=1000 h=2 hkv=2" + t + " mask=window wl=300 wr=200",
  };
}

TEST_F(CudaSm90Backward, UncoveredPathsMatchFloat64) {
  for (int d : dims_) {
    for (const std::string& text : uncovered_shapes(d, d == 64 ? "f16" : "bf16")) expect_sm90_backward(text);
  }
}

// seqlen 4097 both ways (33 key blocks, the last with one key): one head, once (the serial
// naive f32 bound of the harness costs ~10 s at this size).
TEST_F(CudaSm90Backward, Seqlen4097MatchesFloat64) {
  expect_sm90_backward("b=1 sq=4097 sk=4097 h=1 hkv=1 d=" + std::to_string(dims_.front()) + " dtype=bf16 mask=causal");
}

// The same paths in deterministic mode, once per dQ reduction (the semaphore ranks with
// windows, many heads per KV head and query blocks that no key block serves).
TEST_F(CudaSm90Backward, UncoveredPathsDeterministic) {
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : dims_) {
      const std::string hd = " d=" + std::to_string(d) + " dtype=bf16 det=1";
      expect_sm90_backward("b=2 sq=129 sk=257 h=32 hkv=2" + hd + " mask=causal");
      expect_sm90_backward("b=2 sq=700 sk=300 h=4 hkv=2" + hd + " mask=window wl=50 align=bottom_right");
      expect_sm90_backward("b=1 sq=600 sk=900 h=2 hkv=2" + hd + " mask=window wr=30");
      expect_sm90_backward("b=1 sq=1000 sk=1000 h=2 hkv=2" + hd + " mask=window wl=300 wr=200");
    }
  }
}

// Every deterministic order (flash_bwd_sm90/tile_scheduler.hpp, FASTATTN_CUDA_SM90_BWD_ORDER):
// ascending key blocks across heads (the default), head-major, shortest first (descending
// key blocks, ranks from the last) and ascending within groups of 3 (batch, KV head) pairs
// (grouped; 4 and 14 pairs, so the last group is partial): right and bitwise repeatable where a
// query block is added to by many key blocks (causal, bottom-right with seqlen_q != seqlen_k, a
// two-sided window, none; GQA).
TEST_F(CudaSm90Backward, DeterministicOrdersMatchFloat64AndRepeat) {
  const ScopedEnv pairs("FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS", std::string("3"));
  for (const char* order : {"longest_first", "head_major", "shortest_first", "grouped"}) {
    const ScopedEnv o("FASTATTN_CUDA_SM90_BWD_ORDER", std::string(order));
    for (int d : dims_) {
      const std::string hd = " d=" + std::to_string(d) + " dtype=bf16 det=1";
      for (const std::string& text : {"b=2 sq=1000 sk=1000 h=4 hkv=2" + hd + " mask=causal",
                                      "b=1 sq=700 sk=1500 h=2 hkv=1" + hd + " mask=causal align=bottom_right",
                                      "b=1 sq=900 sk=900 h=2 hkv=2" + hd + " mask=window wl=200 wr=50",
                                      "b=2 sq=700 sk=700 h=14 hkv=7" + hd + " mask=none"}) {
        expect_sm90_backward(text);
        expect_bitwise_repeatable(text, std::string(order) + ": ");
      }
    }
  }
}

// Rows of a gradient that are zero by the mask (a query row that sees no key: dq; a key no
// query sees: dk, dv) are exactly zero, with every dQ reduction and deterministic mode, and no
// gradient holds a NaN. Each case has such rows (checked, so the test cannot pass vacuously).
// Rows whose float64 value is zero by cancellation are not demanded to be exactly zero: a query
// that sees exactly one key j has P = 1 and D = dO . O = dO . V_j = dP exactly in float64, so
// its dq row is 0 there, but the kernel's f32 dP and D sum in different orders (the first GPU
// run flagged 1-8 such rows per case; they are within the float64 tolerance the other tests
// check).
TEST_F(CudaSm90Backward, FullyMaskedRowsGiveZeroGradients) {
  // rows: (tokens, heads) in the gradient's [b * seqlen, heads, d] order; sees(i) says whether
  // row token i % seqlen has any visible partner.
  auto zero_rows = [](const std::vector<double>& ref, const std::vector<double>& got, std::int64_t d,
                      std::int64_t seqlen, std::int64_t heads, const std::function<bool(std::int64_t)>& sees,
                      std::int64_t& expected, std::int64_t& wrong, std::int64_t& nans) {
    const std::int64_t rows = static_cast<std::int64_t>(ref.size()) / d;
    for (std::int64_t r = 0; r < rows; ++r) {
      bool ref_zero = true, got_zero = true;
      for (std::int64_t c = 0; c < d; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * d + c);
        ref_zero = ref_zero && ref[i] == 0.0;
        got_zero = got_zero && got[i] == 0.0;
        nans += std::isnan(got[i]) ? 1 : 0;
      }
      if (sees((r / heads) % seqlen)) continue;
      ++expected;
      EXPECT_TRUE(ref_zero) << "float64 gradient row " << r << " of a fully masked token is not zero";
      wrong += got_zero ? 0 : 1;
    }
  };
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : dims_) {
      const std::string hd = " d=" + std::to_string(d);
      for (const std::string& text :
           {"b=2 sq=300 sk=65 h=4 hkv=2" + hd + " dtype=bf16 mask=causal align=bottom_right",
            "b=1 sq=65 sk=1000 h=2 hkv=1" + hd + " dtype=f16 mask=causal align=top_left det=1",
            "b=2 sq=500 sk=200 h=2 hkv=2" + hd + " dtype=bf16 mask=window wl=10 wr=0 align=bottom_right softcap=30",
            "b=1 sq=65 sk=1000 h=4 hkv=1" + hd + " dtype=bf16 mask=window wl=50 align=bottom_right det=1"}) {
        harness::CaseData data(harness::parse_case(text));
        const AttentionProblem problem = data.problem();
        const reference::ForwardResult ref = reference::forward_f64(problem);
        data.set_forward_outputs(ref.out, ref.lse);
        const reference::BackwardResult grad = reference::backward_f64(problem);
        const KernelChoice choice = data.run_backward(Backend::cuda);
        EXPECT_EQ(choice.isa, "sm90") << text << "\n" << choice.describe();
        std::int64_t expected = 0, wrong = 0, nans = 0;
        const SequenceMask mask = problem.mask_for(problem.seqlen_q, problem.seqlen_k);
        const auto query_sees = [&](std::int64_t i) {
          for (std::int64_t j = 0; j < problem.seqlen_k; ++j)
            if (mask.visible(i, j)) return true;
          return false;
        };
        const auto key_is_seen = [&](std::int64_t j) {
          for (std::int64_t i = 0; i < problem.seqlen_q; ++i)
            if (mask.visible(i, j)) return true;
          return false;
        };
        zero_rows(grad.dq, data.dq.values(), d, problem.seqlen_q, problem.num_heads, query_sees, expected, wrong, nans);
        zero_rows(grad.dk, data.dk.values(), d, problem.seqlen_k, problem.num_kv_heads, key_is_seen, expected, wrong, nans);
        zero_rows(grad.dv, data.dv.values(), d, problem.seqlen_k, problem.num_kv_heads, key_is_seen, expected, wrong, nans);
        EXPECT_GT(expected, 0) << dq << " " << text << ": no zero gradient row to check";
        EXPECT_EQ(wrong, 0) << dq << " " << text << ": rows that must be exactly zero are not";
        EXPECT_EQ(nans, 0) << dq << " " << text;
      }
    }
  }
}

TEST_F(CudaSm90Backward, UnservedCallsRunSm80WithAReason) {
  const std::string hd = " d=" + std::to_string(dims_.front());
  auto expect_sm80 = [](const std::string& text, const std::string& why) {
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda);
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
    EXPECT_EQ(r.backward_choice.isa, "sm80") << r.backward_choice.describe();
    EXPECT_NE(r.backward_choice.reason.find("on an sm90 device"), std::string::npos) << r.backward_choice.describe();
    EXPECT_NE(r.backward_choice.reason.find(why), std::string::npos) << r.backward_choice.describe();
  };
  if (cuda::kSm90BackwardVarlen == cuda::Sm90BackwardVarlen::sm80) {
    expect_sm80("b=3 sq=7 sk=7 h=2 hkv=2" + hd + " dtype=bf16 mask=none lens_q=0,70,1 lens_k=5,0,90", "varlen");
  }
  for (int d : build_info().cuda_head_dims) {
    if (cuda::sm90_backward_has_head_dim(d)) continue;
    expect_sm80("b=1 sq=100 sk=100 h=2 hkv=2 d=" + std::to_string(d) + " dtype=bf16 mask=causal",
                "no sm90 backward for head_dim");
  }
  const ScopedEnv off("FASTATTN_CUDA_BWD_SM90", std::string("0"));
  expect_sm80("b=1 sq=300 sk=300 h=2 hkv=2" + hd + " dtype=bf16 mask=causal", "FASTATTN_CUDA_BWD_SM90=0");
}

}  // namespace
}  // namespace fastattn::testing
#endif
