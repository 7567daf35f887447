// kv_cache_test.cpp — attention_with_kv_cache and KVCachePlan on the CPU (fastattn/kv_cache.hpp)
// against the float64 oracle (kv_cache_support.hpp: out and lse by the harness rule, poisoned
// outputs, a NaN-filled cache outside the tokens it holds, the append checked bit for bit).
//
// The grid: cache lengths 0, 1, 17, a ragged batch (17, 0, 1, 40) and a longer pair (300, 5);
// contiguous caches and page sizes 1, 3, 16; seqlen_q 1 and 4 (the decode kernel reading the
// pages) and 33 (chunked prefill: pages gathered, then the prefill kernel); every pair, with
// heads (MHA 4/4, GQA 7:1 as 14/2, MQA 6/1, GQA 8:1 which takes AMX tiles for bf16), masks
// (causal, none, sliding windows, soft-cap), dtypes, head dims, appends and layouts rotated over
// the pairs. Each case runs eagerly and through a plan. Then chosen checks: append-then-attend
// equals attending over a cache that already held the tokens, plan.run bitwise equal to the
// eager call, one plan reused with changing seqlens, forced split counts, the prefill route
// forced for short queries, the reference backend, explicit threads, empty calls. The ctest
// entries cpu_kv_cache_amx_emulated and cpu_kv_cache_avx2 run this file again with the AMX form
// on emulated tiles and with the AVX2 kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kv_cache_support.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

std::vector<KVCase> kv_grid() {
  const std::vector<std::vector<std::int32_t>> lens = {{0}, {1}, {17}, {17, 0, 1, 40}, {300, 5}};
  const std::int64_t pages[] = {0, 1, 3, 16};
  const std::int64_t queries[] = {1, 4, 33};
  const std::int64_t heads[][2] = {{4, 4}, {14, 2}, {6, 1}, {8, 1}};
  const DType dtypes[] = {DType::bf16, DType::f16, DType::f32};
  const std::int64_t dims[] = {64, 128, 40};
  std::vector<KVCase> cases;
  int n = 0;
  for (const auto& l : lens) {
    for (std::int64_t page : pages) {
      for (std::int64_t sq : queries) {
        KVCase c;
        c.cache_lens = l;
        c.page_size = page;
        c.seqlen_q = sq;
        c.num_heads = heads[n % 4][0];
        c.num_kv_heads = heads[n % 4][1];
        c.dtype = dtypes[(n / 4) % 3];
        c.head_dim = dims[(n / 3) % 3];
        switch (n % 5) {
          case 0: c.causal = true; break;
          case 1: c.causal = false; break;
          case 2: c.causal = true; c.window_left = 5; break;
          case 3: c.causal = false; c.window_left = 20; c.window_right = 3; break;
          case 4: c.causal = true; c.softcap = 5.0f; break;
        }
        c.seqlen_new = n % 3 == 0 ? 0 : (n % 3 == 1 ? 1 : 4);
        c.layout = n % 4 == 1 ? KVLayout::unaligned : (n % 4 == 3 ? KVLayout::strided : KVLayout::dense);
        c.shuffle_pages = n % 6 != 5;
        c.with_lse = n % 7 != 6;
        c.seed = 1000 + static_cast<std::uint64_t>(n);
        cases.push_back(c);
        ++n;
      }
    }
  }
  return cases;
}

std::string case_name(const ::testing::TestParamInfo<KVCase>& info) { return "case" + std::to_string(info.index); }

class KVCacheGrid : public ::testing::TestWithParam<KVCase> {};

TEST_P(KVCacheGrid, EagerMatchesFloat64) {
  HostPlace host;
  const KVReport r = check_kv_eager(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
  const std::string expected_prefix = GetParam().seqlen_q <= 16 ? "cpu.kv_cache.decode." : "cpu.kv_cache.";
  EXPECT_EQ(r.choice.kernel.rfind(expected_prefix, 0), 0u) << r.choice.kernel;
}

TEST_P(KVCacheGrid, PlanMatchesFloat64) {
  HostPlace host;
  const KVReport r = check_kv_plan(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
}
INSTANTIATE_TEST_SUITE_P(Cases, KVCacheGrid, ::testing::ValuesIn(kv_grid()), case_name);

// Chosen cases: long caches over several key splits and tiles, AMX-sized GQA, windows that hide
// whole pages, every feature at once.
std::vector<KVCase> kv_chosen() {
  std::vector<KVCase> cases;
  KVCase c;
  c.cache_lens = {2000, 777, 1};
  c.page_size = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = 128;
  c.dtype = DType::bf16;
  c.seqlen_new = 1;
  c.seed = 1;
  cases.push_back(c);  // decode, GQA 4:1 (vdpbf16ps), pages of 16
  c.seqlen_q = 4;
  c.seqlen_new = 4;
  c.seed = 2;
  cases.push_back(c);  // 16 rows per KV head: AMX where present
  c.shuffle_pages = false;
  c.seed = 3;
  cases.push_back(c);  // pages adjacent in memory: AMX tiles read in place across pages
  c = KVCase{};
  c.cache_lens = {1500, 40};
  c.page_size = 3;
  c.num_heads = 14;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.dtype = DType::f16;
  c.window_left = 100;
  c.seqlen_q = 7;
  c.seqlen_new = 7;
  c.layout = KVLayout::unaligned;
  c.seed = 4;
  cases.push_back(c);  // a window that hides most pages
  c.seqlen_q = 40;
  c.seqlen_new = 40;
  c.seed = 5;
  cases.push_back(c);  // chunked prefill over a window: only the visible pages gathered
  c = KVCase{};
  c.cache_lens = {1000, 0, 999};
  c.page_size = 1;
  c.num_heads = 6;
  c.num_kv_heads = 1;
  c.head_dim = 256;
  c.dtype = DType::bf16;
  c.softcap = 20.0f;
  c.seqlen_new = 2;
  c.seqlen_q = 2;
  c.layout = KVLayout::strided;
  c.seed = 6;
  cases.push_back(c);  // page size 1, MQA, d 256, soft-cap
  c = KVCase{};
  c.cache_lens = {64, 64};
  c.page_size = 64;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 96;
  c.dtype = DType::f32;
  c.causal = false;
  c.softmax_scale = -0.3f;
  c.seqlen_new = 64;
  c.seqlen_q = 64;
  c.threads = 3;
  c.seed = 7;
  cases.push_back(c);  // a whole page appended, chunked prefill, negative scale, 3 threads
  return cases;
}
class KVCacheChosen : public ::testing::TestWithParam<KVCase> {};

TEST_P(KVCacheChosen, EagerMatchesFloat64) {
  HostPlace host;
  const KVReport r = check_kv_eager(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
}
TEST_P(KVCacheChosen, PlanMatchesFloat64) {
  HostPlace host;
  const KVReport r = check_kv_plan(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
}
// Forced split counts: one, a few, more splits than keys (empty splits folded away).
TEST_P(KVCacheChosen, ForcedSplitsMatchFloat64) {
  if (GetParam().seqlen_q > 16) GTEST_SKIP() << "the prefill route has no key splits";
  for (const char* splits : {"1", "3", "64"}) {
    const ScopedEnv env("FASTATTN_CPU_DECODE_SPLITS", std::string(splits));
    HostPlace host;
    const KVReport r = check_kv_eager(GetParam(), host);
    EXPECT_TRUE(r.pass) << r.text;
    EXPECT_NE(r.choice.kernel.find(std::string(".split") + splits), std::string::npos) << r.choice.kernel;
  }
}
// The prefill route for short queries too (FASTATTN_CPU_DECODE=off): the gather path.
TEST_P(KVCacheChosen, PrefillRouteMatchesFloat64) {
  const ScopedEnv env("FASTATTN_CPU_DECODE", std::string("off"));
  HostPlace host;
  const KVReport r = check_kv_eager(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
  EXPECT_EQ(r.choice.kernel.rfind(GetParam().page_size > 0 ? "cpu.kv_cache.gather." : "cpu.kv_cache.forward.", 0), 0u)
      << r.choice.kernel;
  EXPECT_NE(r.choice.reason.find("per sequence"), std::string::npos) << r.choice.reason;
}
TEST_P(KVCacheChosen, ReferenceBackendMatchesFloat64) {
  HostPlace host(Backend::reference);
  const KVReport r = check_kv_eager(GetParam(), host);
  EXPECT_TRUE(r.pass) << r.text;
  EXPECT_EQ(r.choice.kernel, "reference.kv_cache.f64");
}
INSTANTIATE_TEST_SUITE_P(Cases, KVCacheChosen, ::testing::ValuesIn(kv_chosen()), case_name);

// out and lse of a call on `data`, after poisoning, as raw bytes.
struct Outputs {
  std::vector<std::uint8_t> out, lse;
  KernelChoice choice;
};
Outputs run_eager(KVData& data) {
  HostPlace host;
  data.poison_outputs();
  const KVData::Views v = data.views(host);
  Outputs o;
  o.choice = attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, data.options(Backend::cpu));
  o.out = data.out.snapshot();
  o.lse = data.lse.snapshot();
  return o;
}
Outputs run_plan(KVData& data, std::int64_t max_cache_len) {
  HostPlace host;
  data.poison_outputs();
  const KVData::Views v = data.views(host);
  KVCacheShape shape = kv_cache_shape(v.q, v.cache, v.lse, v.append);
  shape.max_cache_len = max_cache_len;
  const KVCachePlan plan(shape, data.options(Backend::cpu));
  Outputs o;
  o.choice = plan.run(v.q, v.cache, v.out, v.lse, v.append);
  EXPECT_EQ(o.choice.kernel, plan.choice().kernel);
  o.out = data.out.snapshot();
  o.lse = data.lse.snapshot();
  return o;
}

// A plan made for the eager call's longest cache gives the eager call's bits (the issue's
// plan/run contract on the CPU), for the decode and the prefill routes.
TEST(KVCache, PlanRunIsBitwiseEqualToEager) {
  std::vector<KVCase> cases = kv_chosen();
  for (KVCase c : {kv_grid()[10], kv_grid()[23], kv_grid()[47]}) cases.push_back(c);
  for (const KVCase& c : cases) {
    KVData eager_data(c), plan_data(c);
    const Outputs eager = run_eager(eager_data);
    const Outputs planned = run_plan(plan_data, c.longest());
    EXPECT_EQ(eager.choice.kernel, planned.choice.kernel) << c.to_string();
    EXPECT_TRUE(eager.out == planned.out) << c.to_string();
    EXPECT_TRUE(eager.lse == planned.lse) << c.to_string();
    EXPECT_TRUE(eager_data.k_cache.snapshot() == plan_data.k_cache.snapshot()) << c.to_string();
  }
}

// Appending n tokens and attending equals attending over a cache that already held them
// (same pages, same longest cache, so the same kernel and splits): bitwise.
TEST(KVCache, AppendThenAttendEqualsPrefilledCache) {
  for (KVCase c : kv_chosen()) {
    if (c.seqlen_new == 0) continue;
    KVData appended(c);
    const Outputs with_append = run_eager(appended);
    // The same tensors, the cache now holding the appended tokens, no append.
    KVCase filled_case = c;
    for (std::int32_t& len : filled_case.cache_lens) len += static_cast<std::int32_t>(c.seqlen_new);
    filled_case.seqlen_new = 0;
    KVData filled(filled_case);
    ASSERT_EQ(filled.k_cache.numel(), appended.k_cache.numel());
    ASSERT_EQ(filled.block_table.numel(), appended.block_table.numel());
    for (std::int64_t i = 0; i < appended.k_cache.numel(); ++i) {
      filled.k_cache.set(i, appended.k_cache.get(i));
      filled.v_cache.set(i, appended.v_cache.get(i));
    }
    for (std::int64_t i = 0; i < appended.q.numel(); ++i) filled.q.set(i, appended.q.get(i));
    for (std::int64_t i = 0; i < appended.block_table.numel(); ++i) filled.block_table.set(i, appended.block_table.get(i));
    const Outputs without = run_eager(filled);
    EXPECT_EQ(with_append.choice.kernel, without.choice.kernel) << c.to_string();
    std::vector<double> a = appended.out.values(), b = filled.out.values();
    EXPECT_TRUE(a == b) << c.to_string();
    EXPECT_TRUE(appended.lse.values() == filled.lse.values() || !c.with_lse) << c.to_string();
  }
}

// One plan, many runs: the same shapes with other seqlens and block-table values each match
// float64 (what a decode loop does between steps; the plan sized for the capacity).
TEST(KVCache, OnePlanServesChangingSeqlens) {
  KVCase c;
  c.cache_lens = {40, 3};
  c.page_size = 16;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.dtype = DType::bf16;
  c.seqlen_new = 1;
  c.spare = 8;
  c.slots = 5;
  KVData first(c);
  HostPlace host;
  KVData::Views v = first.views(host);
  const KVCachePlan plan(kv_cache_shape(v.q, v.cache, v.lse, v.append), first.options(Backend::cpu));
  EXPECT_EQ(plan.shape().max_cache_len, 0);
  for (const std::vector<std::int32_t>& lens : {std::vector<std::int32_t>{40, 3}, {10, 50}, {0, 0}, {63, 1}}) {
    KVCase step = c;
    step.cache_lens = lens;
    step.spare = c.spare + (c.pages_of(0) + c.pages_of(1)) - (step.pages_of(0) + step.pages_of(1));
    KVData data(step);
    ASSERT_EQ(data.k_cache.numel(), first.k_cache.numel()) << step.to_string();
    const KVReport r = judge_kv_call(data, host, [&](const KVData::Views& views) {
      return plan.run(views.q, views.cache, views.out, views.lse, views.append);
    });
    EXPECT_TRUE(r.pass) << r.text;
  }
}

// A plan sized for short caches (max_cache_len 8) still serves longer ones correctly, on the
// decode route (fewer splits than ideal) and the prefill route (its gather buffer holds a
// whole sequence's capacity).
TEST(KVCache, PlanForShortCachesServesLongerOnes) {
  for (std::int64_t sq : {1, 33}) {
    KVCase c;
    c.cache_lens = {60, 5};
    c.seqlen_q = sq;
    c.page_size = 16;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.dtype = DType::f32;
    c.seed = 90 + static_cast<std::uint64_t>(sq);
    KVData data(c);
    HostPlace host;
    const KVData::Views v = data.views(host);
    KVCacheShape shape = kv_cache_shape(v.q, v.cache, v.lse, v.append);
    shape.max_cache_len = 8;
    const KVCachePlan plan(shape, data.options(Backend::cpu));
    const KVReport r = judge_kv_call(data, host, [&](const KVData::Views& views) {
      return plan.run(views.q, views.cache, views.out, views.lse, views.append);
    });
    EXPECT_TRUE(r.pass) << r.text;
  }
}

// A plan's run refuses a call of another shape, naming the argument.
TEST(KVCache, PlanRefusesAnotherShape) {
  KVCase c;
  c.cache_lens = {5, 6};
  c.page_size = 4;
  KVData data(c);
  HostPlace host;
  const KVData::Views v = data.views(host);
  const KVCachePlan plan(kv_cache_shape(v.q, v.cache, v.lse, v.append), data.options(Backend::cpu));
  KVCase other = c;
  other.cache_lens = {5, 6, 7};
  KVData more(other);
  const KVData::Views w = more.views(host);
  expect_error([&] { plan.run(w.q, w.cache, w.out, w.lse, w.append); }, ErrorCode::invalid_argument,
               "q: expected batch (shape[0]) = 2 (the plan's), got 3");
  expect_error([&] { plan.run(v.q, v.cache, v.out, std::nullopt, v.append); }, ErrorCode::invalid_argument,
               "lse: expected a tensor (the plan has with_lse), got none");
}

// Explicit thread counts, and a batch of one long sequence over all threads.
TEST(KVCache, ThreadCounts) {
  for (int threads : {1, 2, 5}) {
    KVCase c;
    c.cache_lens = {3000};
    c.page_size = 16;
    c.num_heads = 8;
    c.num_kv_heads = 8;
    c.dtype = DType::f32;
    c.threads = threads;
    c.seed = 40 + static_cast<std::uint64_t>(threads);
    HostPlace host;
    const KVReport r = check_kv_eager(c, host);
    EXPECT_TRUE(r.pass) << r.text;
    EXPECT_EQ(r.choice.num_threads, threads);
  }
}

// batch 0 and seqlen_q 0 are valid empty calls; with seqlen_q 0 the append still happens.
TEST(KVCache, EmptyCalls) {
  for (std::int64_t page : {0, 4}) {
    HostPlace host;
    KVCase none;
    none.cache_lens = {};
    none.page_size = page;
    none.seqlen_new = 2;
    KVData empty(none);
    const KVData::Views e = empty.views(host);
    EXPECT_NO_THROW(attention_with_kv_cache(e.q, e.cache, e.out, e.lse, e.append, empty.options(Backend::cpu)));
    EXPECT_NO_THROW(KVCachePlan(kv_cache_shape(e.q, e.cache, e.lse, e.append), empty.options(Backend::cpu))
                        .run(e.q, e.cache, e.out, e.lse, e.append));
    KVCase fill_only;
    fill_only.cache_lens = {3, 0};
    fill_only.seqlen_q = 0;
    fill_only.seqlen_new = 5;
    fill_only.page_size = page;
    KVData data(fill_only);
    const KVData::Views v = data.views(host);
    const std::vector<std::uint32_t> expected = data.expected_cache(false);
    EXPECT_NO_THROW(attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, data.options(Backend::cpu)));
    for (std::int64_t i = 0; i < data.k_cache.numel(); ++i) {
      ASSERT_EQ(data.k_cache.bits(i), expected[static_cast<std::size_t>(i)]) << "element " << i << " page " << page;
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
