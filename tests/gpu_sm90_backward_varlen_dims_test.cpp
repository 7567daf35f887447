// gpu_sm90_backward_varlen_dims_test.cpp — the Hopper backward (src/cuda/flash_bwd_sm90, issue
// 16) on varlen batches and at d = 96 / 256, ctest label `gpu`; the fixture and checks of
// gpu_sm90_backward_support.hpp (skipped unless the device's path is sm90).
//
//   * d = 96 (d = 128's tile on zero-padded columns) and d = 256 (its own tile: 64 keys, the MMA
//     warpgroups split dK/dV's columns; no bulk dQ): odd shapes, causal with seqlen_q !=
//     seqlen_k, GQA, soft-cap, windows, deterministic bitwise over 10 runs, d = 96 with bulk dQ,
//     d = 256 with bulk requested (runs atomic). Skipped when the build lacks the head dim or
//     kSm90BackwardHeadDims (flash_bwd_sm90/plan.hpp) leaves it out.
//   * varlen batches (kSm90BackwardVarlen): lengths 0, 1, 63, 65, 1000, seqlen_q != seqlen_k per
//     sequence, causal both alignments, windows, GQA, soft-cap, every built head dim, every dQ
//     reduction, deterministic bitwise over 10 runs;
//   * varlen: +inf / NaN in the next sequence's Q, K, V, dO, out and lse leave a sequence's
//     gradients unchanged.
#include <gtest/gtest.h>

#if defined(FASTATTN_TESTS_CUDA) && FASTATTN_TESTS_CUDA
#include <algorithm>
#include <cstdint>
#include <limits>
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

// d = 96 and d = 256 (written without a GPU; kSm90BackwardHeadDims can drop either): a smaller
// set than d = 64 / 128 (the float64 reference and the naive bound cost more per element),
// covering what is their own. d = 96: tiles padded to 128 columns (TMA zero-fills 96..127, the
// dK/dV/dQ writes skip them; warpgroup 1's dQ adds 32 columns, by atomics and by the bulk
// reduce-add). d = 256: 64-key CTAs whose warpgroups split dK/dV's columns, both computing
// S^T/dP^T and each storing half of dS^T; atomic dQ only.
class CudaSm90BackwardOneDim : public CudaSm90Backward {
 protected:
  void skip_unless_served(int d) {
    const std::vector<int> built = build_info().cuda_head_dims;
    if (std::find(built.begin(), built.end(), d) == built.end()) GTEST_SKIP() << "no d = " << d << " in this build";
    if (!cuda::sm90_backward_has_head_dim(d)) GTEST_SKIP() << "kSm90BackwardHeadDims leaves d = " << d << " out";
  }
};
class CudaSm90BackwardHeadDim96 : public CudaSm90BackwardOneDim {
 protected:
  void SetUp() override {
    CudaSm90Backward::SetUp();
    if (!IsSkipped()) skip_unless_served(96);
  }
};
class CudaSm90BackwardHeadDim256 : public CudaSm90BackwardOneDim {
 protected:
  void SetUp() override {
    CudaSm90Backward::SetUp();
    if (!IsSkipped()) skip_unless_served(256);
  }
};

std::vector<std::string> one_dim_shapes(int d, const char* dtype) {
  const std::string t = " d=" + std::to_string(d) + " dtype=" + dtype;
  return {
      "b=1 sq=1 sk=1 h=2 hkv=2" + t + " mask=none",
      "b=2 sq=1 sk=777 h=2 hkv=1" + t + " mask=none",
      "b=2 sq=17 sk=17 h=3 hkv=3" + t + " mask=none",
      "b=1 sq=65 sk=63 h=2 hkv=2" + t + " mask=none",
      "b=1 sq=17 sk=300 h=2 hkv=1" + t + " mask=causal align=bottom_right",
      "b=1 sq=1023 sk=1023 h=1 hkv=1" + t + " mask=causal",
      "b=2 sq=300 sk=65 h=2 hkv=2" + t + " mask=causal align=bottom_right",  // rows that see no key
      "b=1 sq=65 sk=1000 h=2 hkv=2" + t + " mask=causal align=top_left",     // keys no query sees
      "b=1 sq=700 sk=300 h=4 hkv=2" + t + " mask=causal align=top_left",
      "b=2 sq=200 sk=333 h=7 hkv=1" + t + " mask=none",    // GQA 7:1
      "b=1 sq=300 sk=300 h=8 hkv=2" + t + " mask=causal",  // GQA 4:1, 2 KV heads
      "b=1 sq=257 sk=513 h=3 hkv=1" + t + " mask=window wl=40 wr=7 softcap=30",
      "b=1 sq=500 sk=200 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right",
      "b=1 sq=200 sk=333 h=2 hkv=1" + t + " mask=causal scale=-0.09",
      "b=1 sq=256 sk=256 h=2 hkv=2" + t + " mask=none qk_std=4",
  };
}

// Deterministic mode: right, and the same bits in 10 runs (the current dQ reduction).
void expect_deterministic_one_dim(int d) {
  const std::string hd = " d=" + std::to_string(d);
  for (const std::string& text : {"b=2 sq=700 sk=900 h=4 hkv=2" + hd + " dtype=bf16 mask=causal det=1",
                                  "b=1 sq=600 sk=800 h=2 hkv=2" + hd + " dtype=f16 mask=window wl=130 wr=20 det=1",
                                  "b=1 sq=512 sk=1024 h=4 hkv=1" + hd + " dtype=bf16 mask=none det=1"}) {
    expect_sm90_backward(text);
    expect_bitwise_repeatable(text, "");
  }
}

TEST_F(CudaSm90BackwardHeadDim96, OddShapesMatchFloat64) {
  for (const char* dtype : {"bf16", "f16"}) {
    for (const std::string& text : one_dim_shapes(96, dtype)) expect_sm90_backward(text);
  }
}

TEST_F(CudaSm90BackwardHeadDim96, BulkReduceDqMatchesFloat64) {
  const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
  for (const std::string& text : one_dim_shapes(96, "bf16")) expect_sm90_backward(text);
}

TEST_F(CudaSm90BackwardHeadDim96, DeterministicIsBitwiseRepeatable) {
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    expect_deterministic_one_dim(96);
  }
}

TEST_F(CudaSm90BackwardHeadDim256, OddShapesMatchFloat64) {
  for (const char* dtype : {"bf16", "f16"}) {
    for (const std::string& text : one_dim_shapes(256, dtype)) expect_sm90_backward(text);
  }
}

// FASTATTN_CUDA_SM90_BWD_DQ=bulk: d = 256 has no room for the bulk dQ tiles, runs atomic dQ and
// says so.
TEST_F(CudaSm90BackwardHeadDim256, BulkRequestedRunsAtomic) {
  const ScopedEnv bulk("FASTATTN_CUDA_SM90_BWD_DQ", std::string("bulk"));
  for (const std::string& text : {std::string("b=1 sq=300 sk=65 h=2 hkv=1 d=256 dtype=bf16 mask=causal align=bottom_right"),
                                  std::string("b=1 sq=129 sk=200 h=2 hkv=2 d=256 dtype=bf16 mask=none det=1")}) {
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda);
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
    EXPECT_EQ(r.backward_choice.isa, "sm90") << r.backward_choice.describe();
    EXPECT_NE(r.backward_choice.reason.find("red.global.add.v2"), std::string::npos) << r.backward_choice.describe();
  }
}

TEST_F(CudaSm90BackwardHeadDim256, DeterministicIsBitwiseRepeatable) { expect_deterministic_one_dim(256); }

// atomic_tiles needs no shared memory, so d = 256 has it too (its 64 x 128 warpgroup tiles).
TEST_F(CudaSm90BackwardHeadDim256, AtomicTilesDqMatchesFloat64) {
  const ScopedEnv tiles("FASTATTN_CUDA_SM90_BWD_DQ", std::string("atomic_tiles"));
  for (const std::string& text : one_dim_shapes(256, "bf16")) expect_sm90_backward(text);
  expect_deterministic_one_dim(256);
}

// Varlen batches on the sm90 backward: a CTA's sequence offsets and lengths from cu_seqlens,
// TMA rows of the [total tokens, heads, d] tensors (rows past a sequence are the next one's:
// masked keys, +inf lse queries), per-sequence masks and bottom-right offsets, zero-length
// sequences (dK = dV = 0 written, no dQ adds).
std::vector<std::string> varlen_shapes(int d, const char* dtype) {
  const std::string t = " d=" + std::to_string(d) + " dtype=" + dtype;
  return {
      "b=3 sq=7 sk=7 h=2 hkv=2" + t + " mask=none lens_q=0,70,1 lens_k=5,0,90",
      "b=4 sq=8 sk=8 h=2 hkv=1" + t + " mask=causal lens_q=63,65,1,1000 lens_k=65,63,1000,1",
      "b=3 sq=8 sk=8 h=4 hkv=2" + t + " mask=causal align=bottom_right lens_q=300,17,129 lens_k=65,1000,129",
      "b=3 sq=8 sk=8 h=2 hkv=2" + t + " mask=causal align=top_left lens_q=65,1000,7 lens_k=700,300,0",
      "b=2 sq=8 sk=8 h=7 hkv=1" + t + " mask=window wl=40 wr=7 softcap=30 lens_q=257,129 lens_k=513,200",
      "b=3 sq=8 sk=8 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right lens_q=500,1,64 lens_k=200,128,64",
  };
}

TEST_F(CudaSm90Backward, VarlenMatchesFloat64) {
  if (cuda::kSm90BackwardVarlen == cuda::Sm90BackwardVarlen::sm80) GTEST_SKIP() << "kSm90BackwardVarlen is sm80";
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : all_dims()) {
      for (const std::string& text : varlen_shapes(d, d == 128 ? "bf16" : "f16")) expect_sm90_backward(text);
    }
  }
}

TEST_F(CudaSm90Backward, VarlenDeterministicIsBitwiseRepeatable) {
  if (cuda::kSm90BackwardVarlen == cuda::Sm90BackwardVarlen::sm80) GTEST_SKIP() << "kSm90BackwardVarlen is sm80";
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : dims_) {
      const std::string text = "b=3 sq=8 sk=8 h=4 hkv=2 d=" + std::to_string(d) +
                               " dtype=bf16 mask=causal det=1 lens_q=700,1,300 lens_k=900,65,0";
      expect_sm90_backward(text);
      expect_bitwise_repeatable(text, std::string(dq) + " ");
    }
  }
}

// A CTA's tiles reach past its sequence's end into the next sequence's tokens (the packed
// tensor maps load them; consumer.cuh: zero_key_rows_past_end, zero_query_rows_past_end). With
// +inf and NaN in the next sequence's Q, K, V, dO, out and lse, the first sequence's dq, dk and
// dv must be finite and bitwise those of finite values there (their P and dS are 0 on those
// rows, and 0 x inf would be NaN). Deterministic mode, so dQ's adds have one order. First
// sequences of 100 and 200 tokens: each ends inside a key block (128 keys; d = 256: 64) and a
// query block (64), and is followed by one of 60; GQA 2:1, so a CTA meets the last query block
// once per query head; causal and not; every dQ reduction; every built head dim.
TEST_F(CudaSm90Backward, VarlenNonFiniteNextSequenceDoesNotReachThisOne) {
  if (cuda::kSm90BackwardVarlen == cuda::Sm90BackwardVarlen::sm80) GTEST_SKIP() << "kSm90BackwardVarlen is sm80";
  const double kInf = std::numeric_limits<double>::infinity(), kNaN = std::numeric_limits<double>::quiet_NaN();
  for (const char* dq : {"atomic", "atomic_tiles", "bulk"}) {
    const ScopedEnv mode("FASTATTN_CUDA_SM90_BWD_DQ", std::string(dq));
    for (int d : all_dims()) {
      for (const std::int64_t first : {100, 200}) {
        for (const char* mask : {"none", "causal"}) {
          const std::string lens = std::to_string(first) + ",60";
          const std::string text = "lens_q=" + lens + " lens_k=" + lens + " h=2 hkv=1 d=" + std::to_string(d) +
                                   " dtype=bf16 mask=" + mask + " det=1";
          const std::string what = std::string(dq) + " " + text;
          harness::CaseData data(harness::parse_case(text));
          const reference::ForwardResult ref = reference::forward_f64(data.problem());
          data.set_forward_outputs(ref.out, ref.lse);
          const std::int64_t total = data.total_q();  // = total_k
          // The bits of the first sequence's gradient rows (tokens [0, first) of [total, heads, d]).
          auto first_gradients = [&] {
            const KernelChoice c = data.run_backward(Backend::cuda);
            EXPECT_EQ(c.isa, "sm90") << what << "\n" << c.describe();
            std::vector<std::uint32_t> bits;
            for (const harness::HostTensor* g : {&data.dq, &data.dk, &data.dv}) {
              for (std::int64_t i = 0; i < g->numel() / total * first; ++i) bits.push_back(g->bits(i));
            }
            return bits;
          };
          const std::vector<std::uint32_t> finite = first_gradients();
          // The second sequence's tokens: +inf and NaN in turn (lse [h, total_q]: its columns).
          for (harness::HostTensor* t : {&data.q, &data.k, &data.v, &data.dout, &data.out}) {
            const std::int64_t row = t->numel() / total;
            for (std::int64_t i = first * row; i < t->numel(); ++i) t->set(i, i % 2 ? kInf : kNaN);
          }
          for (std::int64_t i = 0; i < data.lse.numel(); ++i) {
            if (i % total >= first) data.lse.set(i, i % 2 ? kInf : kNaN);
          }
          const std::vector<std::uint32_t> poisoned = first_gradients();
          std::size_t non_finite = 0;
          for (std::uint32_t x : finite) non_finite += (x & 0x7f80u) == 0x7f80u;  // bf16 inf / NaN
          EXPECT_EQ(non_finite, 0u) << what << ": finite inputs";
          non_finite = 0;
          for (std::uint32_t x : poisoned) non_finite += (x & 0x7f80u) == 0x7f80u;
          EXPECT_EQ(non_finite, 0u) << what;
          EXPECT_TRUE(finite == poisoned) << what << ": the next sequence's values changed this one's gradients";
        }
      }
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
#endif
