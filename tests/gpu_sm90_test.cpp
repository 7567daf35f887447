// gpu_sm90_test.cpp — the Hopper forward path (src/cuda/flash_fwd_sm90, issue 15) against
// float64, ctest label `gpu`. Skipped unless the device's path is sm90 (a build with
// FASTATTN_CUDA_ARCHS containing 90, on a compute capability 9.0 GPU, FASTATTN_CUDA_PATH unset
// or sm90). The settings that must give the same bits are in gpu_sm90_bits_test.cpp.
//
//   * odd shapes against float64 (one split forced, so the few-CTA ones stay on sm90), with the
//     softmax/GEMM overlap and without: seqlen 17, 1023, 4097; seqlen_q != seqlen_k both ways with
//     causal masks in which whole rows see no key; windows; GQA 7:1; soft-cap; large logits;
//     both dtypes, every sm90 head dim; the kernel must be the sm90 one;
//   * varlen batches (cu_seqlens; flash_fwd_sm90/plan.hpp: kSm90Varlen) against float64: empty
//     sequences, lengths 1/17/1023/4097 mixed, seqlen_q != seqlen_k per sequence, causal rows
//     that see no key, GQA 7:1, windows, soft-cap, every scheduler, the plain loop;
//   * calls the sm90 kernel does not serve (seqlen_q <= 16, head dims without a unit) run the
//     sm80 kernels and the reason says why;
//   * the wide key tile (FASTATTN_CUDA_SM90_BLOCK_N=176) against float64, and the calls it does
//     not serve;
//   * varlen: +inf / NaN in the next sequence's K and V leave a sequence's output unchanged;
//   * d = 64's narrow tile (forced by FASTATTN_CUDA_SM90_D64_TILE=128, and by its rule) against float64;
//   * d = 128's short tile (builds with FASTATTN_SM90_D128_SHORT_TILE=1; forced by
//     FASTATTN_CUDA_SM90_D128_TILE=64, and by its rule) against float64.
#include <gtest/gtest.h>

#if defined(FASTATTN_TESTS_CUDA) && FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gpu_sm90_support.hpp"

namespace fastattn::testing {
namespace {

TEST_F(CudaSm90, OddShapesMatchFloat64) {
  // One split: the heuristic would hand the few-CTA shapes here to sm80's split-KV.
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    const std::string hd = " d=" + std::to_string(d);
    for (const char* dtype : {" dtype=bf16", " dtype=f16"}) {
      const std::string t = hd + dtype;
      expect_sm90("b=2 sq=17 sk=17 h=3 hkv=3" + t + " mask=none");
      expect_sm90("b=1 sq=1023 sk=1023 h=2 hkv=1" + t + " mask=causal");
      expect_sm90("b=1 sq=4097 sk=4097 h=1 hkv=1" + t + " mask=causal");
      // seqlen_q > seqlen_k, bottom-right causal: the first 235 rows see no key (0, lse -inf).
      expect_sm90("b=2 sq=300 sk=65 h=2 hkv=2" + t + " mask=causal align=bottom_right");
      expect_sm90("b=2 sq=300 sk=65 h=2 hkv=1" + t + " mask=causal align=top_left");
      expect_sm90("b=1 sq=65 sk=1000 h=2 hkv=2" + t + " mask=causal align=bottom_right");
      expect_sm90("b=1 sq=129 sk=700 h=2 hkv=2" + t + " mask=causal align=top_left");
      // A window that misses every key of some rows, and one that cuts both sides.
      expect_sm90("b=1 sq=500 sk=200 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right");
      expect_sm90("b=1 sq=257 sk=513 h=3 hkv=1" + t + " mask=window wl=40 wr=7 softcap=30");
      expect_sm90("b=2 sq=200 sk=333 h=7 hkv=1" + t + " mask=none");  // GQA 7:1
      expect_sm90("b=1 sq=200 sk=333 h=2 hkv=1" + t + " mask=causal scale=-0.09");
      expect_sm90("b=1 sq=129 sk=4099 h=2 hkv=2" + t + " mask=none qk_std=4");  // large logits
      expect_sm90("b=1 sq=256 sk=256 h=2 hkv=2" + t + " mask=none qk_std=12");
    }
  }
}

// A few small sm90 calls (every mask kind, GQA, soft-cap, both dtypes, varlen): the set that
// compute-sanitizer's memcheck, racecheck and synccheck run (tools/dev/gpu-sm90.sh).
TEST_F(CudaSm90, SmallShapesMatchFloat64) {
  for (int d : dims_) {
    const std::string hd = " d=" + std::to_string(d);
    expect_sm90("b=1 sq=17 sk=300 h=2 hkv=1" + hd + " dtype=bf16 mask=none");
    expect_sm90("b=1 sq=300 sk=65 h=2 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
    expect_sm90("b=1 sq=257 sk=513 h=2 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    // varlen: an empty sequence, one without keys, tiles reaching into the next sequence
    expect_varlen("lens_q=0,17,130,40 lens_k=5,0,300,70 h=2 hkv=1" + hd + " dtype=bf16 mask=causal");
  }
}

// The consumer loop without the softmax/GEMM overlap (FASTATTN_CUDA_SM90_OVERLAP=0, the A/B
// baseline) computes the same function.
TEST_F(CudaSm90, PlainLoopMatchesFloat64) {
  const ScopedEnv plain("FASTATTN_CUDA_SM90_OVERLAP", std::string("0"));
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    const std::string hd = " d=" + std::to_string(d);
    expect_sm90("b=1 sq=1023 sk=1023 h=2 hkv=1" + hd + " dtype=bf16 mask=causal");
    expect_sm90("b=2 sq=300 sk=65 h=2 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
    expect_sm90("b=1 sq=257 sk=513 h=3 hkv=1" + hd + " dtype=bf16 mask=window wl=40 wr=7 softcap=30");
    expect_sm90("b=1 sq=129 sk=4099 h=2 hkv=2" + hd + " dtype=f16 mask=none qk_std=4");
  }
}

// d = 256's overlap loop (its default for every call since the seventeenth session's
// measurement, plan.hpp sm90_overlap; forced here, whatever the default): against float64 on the
// plain loop's shapes, varlen, every scheduler, with and without the ordered issue; the plan
// must say it overlaps.
TEST_F(CudaSm90, OverlapLoopAtHeadDim256MatchesFloat64) {
  if (std::find(dims_.begin(), dims_.end(), 256) == dims_.end()) GTEST_SKIP() << "no d 256 in this build";
  const ScopedEnv overlap("FASTATTN_CUDA_SM90_OVERLAP", std::string("1"));
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (const char* scheduler : {"grid", "persistent", "dynamic"}) {
    for (const char* order : {"0", "1"}) {
      const ScopedEnv env_s("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
      const ScopedEnv env_o("FASTATTN_CUDA_SM90_WG_ORDER", std::string(order));
      const harness::CheckReport r = harness::check_case(
          harness::parse_case("b=1 sq=1023 sk=1023 h=2 hkv=1 d=256 dtype=bf16 mask=causal"), Backend::cuda, forward_only());
      EXPECT_TRUE(r.pass) << scheduler << " order=" << order << "\n" << r.to_string();
      EXPECT_EQ(r.forward_choice.isa, "sm90") << r.forward_choice.describe();
      EXPECT_NE(r.forward_choice.reason.find("softmax overlapped"), std::string::npos) << r.forward_choice.describe();
      // The ordered issue where asked for (the dynamic scheduler has no ordered kernel).
      const bool ordered = std::string(order) == "1" && std::string(scheduler) != "dynamic";
      EXPECT_EQ(r.forward_choice.reason.find("alternating their GEMM issue") != std::string::npos, ordered)
          << r.forward_choice.describe();
      expect_sm90("b=2 sq=300 sk=65 h=2 hkv=2 d=256 dtype=f16 mask=causal align=bottom_right");
      expect_sm90("b=1 sq=257 sk=513 h=3 hkv=1 d=256 dtype=bf16 mask=window wl=40 wr=7 softcap=30");
      expect_sm90("b=1 sq=129 sk=4099 h=2 hkv=2 d=256 dtype=f16 mask=none qk_std=4");
      expect_varlen("lens_q=0,17,130,40 lens_k=5,0,300,70 h=2 hkv=1 d=256 dtype=bf16 mask=causal");
    }
  }
}

// Random cases of the sm80 suites' generator with no varlen/short rows filtered out: whatever
// path each takes, it must be right; most take sm90.
TEST_F(CudaSm90, RandomCasesMatchFloat64) {
  harness::CaseLimits l;
  l.dtypes = {DType::f16, DType::bf16};
  for (int d : dims_) l.head_dims.push_back(d);
  l.allow_strided = false;
  l.allow_long = true;
  int sm90 = 0;
  for (std::uint64_t seed = 1; seed <= 80; ++seed) {
    const harness::Case c = harness::random_case(seed, l);
    const harness::CheckReport r = harness::check_case(c, Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << "seed " << seed << "\n" << r.to_string();
    sm90 += r.forward_choice.isa == "sm90";
  }
  EXPECT_GT(sm90, 10);
}

TEST_F(CudaSm90, UnservedCallsRunSm80WithAReason) {
  const std::string hd = " d=" + std::to_string(dims_.front());
  struct Routed {
    std::string text, why;
  };
  for (const Routed& c : {Routed{"b=1 sq=1 sk=777 h=8 hkv=8" + hd + " dtype=bf16 mask=none", "seqlen_q <= 16"},
                          Routed{"b=2 sq=16 sk=300 h=2 hkv=2" + hd + " dtype=f16 mask=causal", "seqlen_q <= 16"},
                          // (with kSm90Varlen off the reason is "varlen batches: ... switched off")
                          Routed{"h=2 hkv=2" + hd + " dtype=bf16 mask=none lens_q=0,16,1 lens_k=5,0,90", "varlen"}}) {
    const harness::CheckReport r = harness::check_case(harness::parse_case(c.text), Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << c.text << "\n" << r.to_string();
    EXPECT_EQ(r.forward_choice.isa, "sm80") << r.forward_choice.describe();
    EXPECT_NE(r.forward_choice.reason.find("on an sm90 device"), std::string::npos) << r.forward_choice.describe();
    EXPECT_NE(r.forward_choice.reason.find(c.why), std::string::npos) << r.forward_choice.describe();
  }
  for (int d : build_info().cuda_head_dims) {
    if (cuda::sm90_has_head_dim(d)) continue;
    const std::string text = "b=1 sq=100 sk=100 h=2 hkv=2 d=" + std::to_string(d) + " dtype=bf16 mask=causal";
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
    EXPECT_NE(r.forward_choice.reason.find("no sm90 kernel for head_dim"), std::string::npos)
        << r.forward_choice.describe();
  }
}

// Varlen batches on the sm90 kernels (plan.hpp: kSm90Varlen; off, they run sm80 with the
// reason). The packed tensor maps load past a sequence's end into the next sequence's rows:
// short sequences sit before long ones with large logits, so an unmasked key or a store past
// the end shows. Empty sequences (q and k), a 1-token query, sequences with queries and no keys
// (O = 0, lse = -inf), causal rows that see no key, GQA 7:1, windows, soft-cap. One split, as
// above. d = 64, 128 and 256 where built (d = 96 is d = 128's kernel).
TEST_F(CudaSm90, VarlenMatchesFloat64) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    if (d == 96) continue;
    const std::string hd = " d=" + std::to_string(d);
    // Lengths 1/17/1023/4097 mixed with empty ones (q empty, k empty, both); at d = 256 the
    // longest is 2049, to keep the float64 reference's time down.
    const std::string longest = d >= 256 ? "2049" : "4097";
    expect_varlen("lens_q=0,1,17,1023," + longest + ",0 lens_k=5,17,0,1023," + longest + ",0 h=1 hkv=1" + hd +
                  " dtype=bf16 mask=causal qk_std=3");
    // seqlen_q != seqlen_k per sequence, both causal alignments (bottom-right: the first 235
    // rows of the first sequence see no key; top-left: rows past the last key see all).
    expect_varlen("lens_q=300,65,129,0,200 lens_k=65,1000,700,33,1 h=2 hkv=2" + hd +
                  " dtype=f16 mask=causal align=bottom_right");
    expect_varlen("lens_q=300,65,129,17 lens_k=65,1000,700,0 h=2 hkv=1" + hd + " dtype=bf16 mask=causal align=top_left");
    expect_varlen("lens_q=200,1,333,0 lens_k=333,90,200,7 h=7 hkv=1" + hd + " dtype=f16 mask=none qk_std=4");  // GQA 7:1
    expect_varlen("lens_q=500,3,257 lens_k=200,3,513 h=2 hkv=2" + hd +
                  " dtype=bf16 mask=window wl=10 wr=0 align=bottom_right");
    expect_varlen("lens_q=257,40,300 lens_k=513,41,290 h=3 hkv=1" + hd + " dtype=f16 mask=window wl=40 wr=7 softcap=30");
  }
  // Every scheduler (persistent, dynamic: the empty tiles past a short sequence among a CTA's
  // tiles), and the consumer loop without the overlap.
  const int d = dims_.front() == 96 && dims_.size() > 1 ? dims_[1] : dims_.front();
  const std::string hd = " d=" + std::to_string(d);
  for (const char* scheduler : {"grid", "persistent", "dynamic"}) {
    const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
    expect_varlen("lens_q=1,700,0,130,64 lens_k=900,700,3,1,640 h=4 hkv=2" + hd + " dtype=bf16 mask=causal");
  }
  const ScopedEnv plain("FASTATTN_CUDA_SM90_OVERLAP", std::string("0"));
  expect_varlen("lens_q=129,0,1000 lens_k=1000,5,129 h=2 hkv=2" + hd + " dtype=bf16 mask=causal qk_std=4");
}

// The wide key tile (128 x 176 at d 128, plan.hpp: kSm90WideBlockN), forced, against float64: key
// counts around and below one tile (1, 17, 175, 176, 177), seqlen_q != seqlen_k both ways, GQA
// 7:1, large logits, 512 query tiles (several per persistent CTA), both dtypes, both schedulers;
// and the calls it does not serve (a mask, a soft-cap) keep 128 keys.
TEST_F(CudaSm90, WideKeyTileMatchesFloat64) {
  if (std::find(dims_.begin(), dims_.end(), 128) == dims_.end()) GTEST_SKIP() << "no d 128 in this build";
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const ScopedEnv wide("FASTATTN_CUDA_SM90_BLOCK_N", std::string("176"));
  auto expect_tile = [](const std::string& text, const char* tile) {
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
    EXPECT_EQ(r.forward_choice.isa, "sm90") << text << "\n" << r.forward_choice.describe();
    EXPECT_NE(r.forward_choice.reason.find(tile), std::string::npos) << text << "\n" << r.forward_choice.describe();
  };
  for (const char* scheduler : {"grid", "persistent"}) {
    const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
    for (const char* dtype : {" dtype=bf16", " dtype=f16"}) {
      const std::string t = std::string(" d=128") + dtype;
      for (const char* sk : {"1", "17", "175", "176", "177", "1000"}) {
        expect_tile(std::string("b=2 sq=130 h=3 hkv=3 mask=none sk=") + sk + t, "128x176 tiles");
      }
      expect_tile("b=1 sq=4097 sk=4097 h=2 hkv=1" + t + " mask=none", "128x176 tiles");
      expect_tile("b=4 sq=1000 sk=1000 h=16 hkv=4" + t + " mask=none", "128x176 tiles");
      expect_tile("b=1 sq=65 sk=1000 h=2 hkv=2" + t + " mask=none", "128x176 tiles");
      expect_tile("b=2 sq=200 sk=333 h=7 hkv=1" + t + " mask=none", "128x176 tiles");  // GQA 7:1
      expect_tile("b=1 sq=129 sk=4099 h=2 hkv=2" + t + " mask=none qk_std=4", "128x176 tiles");
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=causal", "128x128 tiles");
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=none softcap=30", "128x128 tiles");
    }
  }
}

// The d = 64 narrow tile (128 x 128, two consumer warpgroups, the overlap, wave sections under
// persistent; plan.hpp: sm90_d64_narrow_block_m), forced, against float64 on causal calls: both alignments with rows
// that see no key, GQA 7:1, seqlen 17 / 1023 / 4097, large logits, 384
// query tiles (several per persistent CTA), both dtypes, both schedulers (the ordered issue under
// persistent); forced, also calls without a mask; the calls it does not serve (a two-sided
// window, a soft-cap) keep the 192-row tile.
TEST_F(CudaSm90, D64NarrowTileMatchesFloat64) {
  if (std::find(dims_.begin(), dims_.end(), 64) == dims_.end()) GTEST_SKIP() << "no d 64 in this build";
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const ScopedEnv narrow("FASTATTN_CUDA_SM90_D64_TILE", std::string("128"));
  auto expect_tile = [](const std::string& text, bool narrow_tile) {
    expect_sm90_tile(text, "narrow tile", narrow_tile);
  };
  for (const char* scheduler : {"grid", "persistent"}) {
    const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
    for (const char* dtype : {" dtype=bf16", " dtype=f16"}) {
      const std::string t = std::string(" d=64") + dtype;
      for (const std::string& text : causal_tile_cases(t)) expect_tile(text, true);
      // A window bounded on both sides (wl=10 wr=0) is not one-sided: the 192-row tile.
      expect_tile("b=1 sq=500 sk=200 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right", false);
      expect_tile("b=4 sq=1000 sk=1000 h=12 hkv=4" + t + " mask=causal", true);  // 384 query tiles
      // 640 query tiles, 6 of each head's 8 without a key (rows before 800): several tiles per
      // persistent CTA, tiles without keys between tiles with keys.
      expect_tile("b=2 sq=1000 sk=200 h=40 hkv=8" + t + " mask=causal align=bottom_right", true);
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=none", true);
      expect_tile("b=2 sq=512 sk=512 h=5 hkv=1" + t + " mask=none qk_std=4", true);
      expect_tile("b=1 sq=1000 sk=77 h=3 hkv=3" + t + " mask=none", true);
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=causal softcap=30", false);
    }
  }
  // Unforced, the rule: causal calls of at most 16 key tiles (seqlen_k <= 2048).
  const ScopedEnv by_rule("FASTATTN_CUDA_SM90_D64_TILE", std::nullopt);
  expect_tile("b=1 sq=1023 sk=1023 h=2 hkv=1 d=64 dtype=bf16 mask=causal", true);
  expect_tile("b=1 sq=2048 sk=2048 h=2 hkv=2 d=64 dtype=f16 mask=causal", true);
  expect_tile("b=1 sq=4097 sk=4097 h=1 hkv=1 d=64 dtype=bf16 mask=causal", false);
  expect_tile("b=1 sq=512 sk=512 h=2 hkv=2 d=64 dtype=bf16 mask=none", false);
}

// The d = 128 short tile (64 x 64, one consumer warpgroup with the overlap, two CTAs per SM;
// plan.hpp: sm90_d128_short_block_m), in builds that compile it, forced, against float64 on
// causal calls: both alignments with rows that see no key, GQA 7:1, seqlen 1 / 17 / 1023 / 4097
// (several key tiles per query tile, a last query tile of one row), large logits, 1280 query
// tiles (several per persistent CTA, two CTAs per SM), both dtypes, both schedulers; the calls
// it does not serve (no mask, a two-sided window, a soft-cap, varlen) keep the 128-row tile.
TEST_F(CudaSm90, D128ShortTileMatchesFloat64) {
  if (!cuda::sm90_d128_short_tile_compiled(128)) GTEST_SKIP() << "built without FASTATTN_SM90_D128_SHORT_TILE";
  if (std::find(dims_.begin(), dims_.end(), 128) == dims_.end()) GTEST_SKIP() << "no d 128 in this build";
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const ScopedEnv short_tile("FASTATTN_CUDA_SM90_D128_TILE", std::string("64"));
  auto expect_tile = [](const std::string& text, bool short_tile_taken) {
    expect_sm90_tile(text, "short tile", short_tile_taken);
  };
  for (const char* scheduler : {"grid", "persistent"}) {
    const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
    for (const char* dtype : {" dtype=bf16", " dtype=f16"}) {
      const std::string t = std::string(" d=128") + dtype;
      for (const std::string& text : causal_tile_cases(t)) expect_tile(text, true);
      expect_tile("b=4 sq=1000 sk=1000 h=20 hkv=4" + t + " mask=causal", true);  // 1280 query tiles
      expect_tile("b=2 sq=1000 sk=200 h=8 hkv=8" + t + " mask=causal align=bottom_right", true);
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=none", false);
      expect_tile("b=1 sq=500 sk=200 h=2 hkv=2" + t + " mask=window wl=10 wr=0 align=bottom_right", false);
      expect_tile("b=1 sq=300 sk=700 h=2 hkv=2" + t + " mask=causal softcap=30", false);
    }
  }
  // Unforced, the rule: causal calls of at most 8 key tiles of 128 (seqlen_k <= 1024).
  const ScopedEnv by_rule("FASTATTN_CUDA_SM90_D128_TILE", std::nullopt);
  expect_tile("b=1 sq=1024 sk=1024 h=2 hkv=1 d=128 dtype=bf16 mask=causal", true);
  expect_tile("b=1 sq=1025 sk=1025 h=2 hkv=2 d=128 dtype=f16 mask=causal", false);
  expect_tile("b=1 sq=512 sk=512 h=2 hkv=2 d=128 dtype=bf16 mask=none", false);
}

// The plain loop's warpgroups pass on the key tiles none of their rows sees (consumer.cuh:
// pass_stage): d = 64's 192-row tile, forced on short causal calls too (at s1k the first
// warpgroup of query tile 1, rows 192..255, passes on key tile 2), against float64: both
// alignments with rows that see no key (a warpgroup that passes on every tile), a window bounded
// on the left (tiles passed on at both ends), GQA 7:1, several tiles per persistent CTA, both
// dtypes, all three schedulers; the last query tile's third warpgroup (rows past the
// sequence's end) passes on every tile.
TEST_F(CudaSm90, WarpgroupsPassOnKeyTilesTheyDoNotSee) {
  if (std::find(dims_.begin(), dims_.end(), 64) == dims_.end()) GTEST_SKIP() << "no d 64 in this build";
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const ScopedEnv rows192("FASTATTN_CUDA_SM90_D64_TILE", std::string("192"));
  for (const char* scheduler : {"grid", "persistent", "dynamic"}) {
    const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
    for (const char* dtype : {" dtype=bf16", " dtype=f16"}) {
      const std::string t = std::string(" d=64") + dtype;
      expect_sm90("b=1 sq=1023 sk=1023 h=2 hkv=1" + t + " mask=causal");
      expect_sm90("b=2 sq=300 sk=65 h=2 hkv=2" + t + " mask=causal align=bottom_right");
      expect_sm90("b=1 sq=129 sk=700 h=2 hkv=2" + t + " mask=causal align=top_left");
      expect_sm90("b=1 sq=700 sk=1000 h=2 hkv=2" + t + " mask=causal align=bottom_right");
      expect_sm90("b=1 sq=600 sk=600 h=2 hkv=1" + t + " mask=window wl=100 wr=0");
      expect_sm90("b=2 sq=500 sk=500 h=7 hkv=1" + t + " mask=causal qk_std=4");  // GQA 7:1
      expect_sm90("b=2 sq=800 sk=800 h=16 hkv=8" + t + " mask=causal");  // 160 query tiles
    }
  }
  expect_varlen("lens_q=0,700,1,1000,64 lens_k=3,700,900,1000,640 h=4 hkv=2 d=64 dtype=bf16 mask=causal");
}

// Device buffers freed when the scope ends, also on a failed assertion or a throw.
struct DeviceBuffers {
  std::vector<void*> all;
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : all) cudaFree(p);
  }
  void* upload(const void* host, std::size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    all.push_back(p);
    EXPECT_EQ(cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  }
};

// A varlen sequence's last key tile reaches into the next sequence's tokens (the packed tensor
// map loads them; consumer.cuh: zero_v_rows_past_end): with +inf and NaN in the next sequence's
// K and V, the first sequence's output must be finite and bitwise the same as with finite values
// there (its P is 0 on those keys, and 0 x inf would be NaN). First sequences of 100 keys (one
// key tile of 128 at d 64 / 96 / 128, two of 80 at d 256) and of 200 (two tiles of 128: the
// overlapped loop zeroes the tail of tile 0 while tile 1's S runs), each followed by a shorter
// one; both consumer loops (the overlap, the default at d 96 / 128 / 256, and the plain loop,
// FASTATTN_CUDA_SM90_OVERLAP=0), causal and not.
TEST_F(CudaSm90, VarlenNonFiniteNextSequenceDoesNotReachThisOne) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const std::int64_t h = 2;
  for (int d : dims_) {
    for (const std::int32_t first : {100, 200}) {
      const std::vector<std::int32_t> cu = {0, first, first + 60};
      const std::int64_t total = cu.back();
      const std::size_t elements = static_cast<std::size_t>(total * h * d);
      const auto q = random_bf16(elements, 21), k = random_bf16(elements, 22), v = random_bf16(elements, 23);
      // The next sequence's K and V rows: +inf and NaN in turn.
      auto poisoned = [&](std::vector<std::uint16_t> x) {
        for (std::size_t i = static_cast<std::size_t>(first * h * d); i < elements; ++i) x[i] = i % 2 ? 0x7f80 : 0x7fc0;
        return x;
      };
      DeviceBuffers buffers;
      auto view = [&](const std::vector<std::uint16_t>& host) {
        return make_tensor(buffers.upload(host.data(), host.size() * 2), DType::bf16, {total, h, d}, Device::cuda(0));
      };
      AttentionOptions o;
      o.backend = Backend::cuda;
      o.cu_seqlens_q = make_tensor(buffers.upload(cu.data(), cu.size() * 4), DType::i32, {3}, Device::cuda(0));
      o.cu_seqlens_k = o.cu_seqlens_q;
      o.max_seqlen_q = o.max_seqlen_k = first;
      const TensorView qt = view(q);
      // The first sequence's output (first x h x d values) with K and V as given.
      auto first_sequence = [&](const TensorView& kt, const TensorView& vt) {
        const TensorView ot = view(std::vector<std::uint16_t>(elements, 0x7fc0));  // poisoned
        const KernelChoice c = forward(qt, kt, vt, ot, std::nullopt, o);
        EXPECT_EQ(c.isa, "sm90") << c.describe();
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<std::uint16_t> out(static_cast<std::size_t>(first * h * d));
        EXPECT_EQ(cudaMemcpy(out.data(), ot.data, out.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        return out;
      };
      const TensorView k_finite = view(k), v_finite = view(v);
      const TensorView k_poisoned = view(poisoned(k)), v_poisoned = view(poisoned(v));
      for (const bool causal : {false, true}) {
        for (const char* overlap : {"1", "0"}) {
          const ScopedEnv env("FASTATTN_CUDA_SM90_OVERLAP", std::string(overlap));
          o.causal = causal;
          const std::string what = "d=" + std::to_string(d) + " first=" + std::to_string(first) +
                                   (causal ? " causal" : "") + " overlap=" + overlap;
          const std::vector<std::uint16_t> finite = first_sequence(k_finite, v_finite);
          const std::vector<std::uint16_t> with_inf = first_sequence(k_poisoned, v_poisoned);
          EXPECT_EQ(finite, with_inf) << what;
          std::size_t non_finite = 0;
          for (std::uint16_t x : with_inf) non_finite += (x & 0x7f80) == 0x7f80;
          EXPECT_EQ(non_finite, 0u) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
#endif
