// kv_cache_errors_test.cpp — every refusal of attention_with_kv_cache and KVCachePlan, word for
// word: the argument named, the expected and the actual value, and nothing written (out and lse
// still poisoned, the cache bit for bit as before — an append that fails writes nothing).
//
// The base call is valid: batch 2, a paged cache of page size 4 (shuffled pages, spare pages,
// block-table slots past each sequence's pages holding -1), an append of 2 tokens, lse; each
// test breaks one thing.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kv_cache_support.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

KVCase base_case(std::int64_t page_size = 4) {
  KVCase c;
  c.cache_lens = {5, 9};  // pages of 4: sequence 0 uses slots 0..1, sequence 1 slots 0..2 after the append
  c.seqlen_q = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.dtype = DType::bf16;
  c.seqlen_new = 2;
  c.page_size = page_size;
  c.spare = 2;
  c.seed = 77;
  return c;
}

// A call to break: the views of a valid call on the host and its options.
struct Call {
  explicit Call(const KVCase& c) : data(c), v(data.views(host)), options(data.options(Backend::cpu)) {
    data.poison_outputs();
  }
  HostPlace host;
  KVData data;
  KVData::Views v;
  AttentionOptions options;

  // attention_with_kv_cache must throw `code` with `needle` in its message and write nothing.
  void expect_refused(const std::string& needle, ErrorCode code = ErrorCode::invalid_argument) {
    const std::vector<std::uint8_t> k_before = data.k_cache.snapshot(), v_before = data.v_cache.snapshot();
    expect_error([&] { attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, options); }, code, needle);
    EXPECT_EQ(data.out.count_view_bits(harness::poison_bits(data.out.dtype())), data.out.numel()) << "out written";
    EXPECT_EQ(data.lse.count_view_bits(harness::poison_bits(DType::f32)), data.lse.numel()) << "lse written";
    EXPECT_TRUE(data.k_cache.snapshot() == k_before) << "cache.k written";
    EXPECT_TRUE(data.v_cache.snapshot() == v_before) << "cache.v written";
  }
};

void set_i32(const TensorView& t, std::int64_t index, std::int32_t value) {
  static_cast<std::int32_t*>(t.data)[index] = value;
}

// ---- the value errors of the issue: block table, seqlens, append overflow --------------------

TEST(KVCacheErrors, BlockTableEntryOutOfRange) {
  Call call(base_case());
  const std::int64_t row = call.v.cache.block_table->stride[0];
  set_i32(*call.v.cache.block_table, row + 2, 7);  // sequence 1's third page; 7 pages exist (0..6)
  call.expect_refused(
      "cache.block_table: expected entries in [0, num_pages = 7) for the pages a sequence uses (sequence 1 uses slots "
      "0..2), got cache.block_table[1][2] = 7");
  set_i32(*call.v.cache.block_table, row + 2, -1);
  call.expect_refused("got cache.block_table[1][2] = -1");
}

TEST(KVCacheErrors, UnusedBlockTableSlotsAreNotRead) {
  Call call(base_case());
  const std::int64_t row = call.v.cache.block_table->stride[0];
  set_i32(*call.v.cache.block_table, 3, 1 << 30);  // sequence 0's slot 3: past its pages
  set_i32(*call.v.cache.block_table, row + 3, -7);
  EXPECT_NO_THROW(attention_with_kv_cache(call.v.q, call.v.cache, call.v.out, call.v.lse, call.v.append, call.options));
}

TEST(KVCacheErrors, SeqlensBeyondCapacity) {
  Call call(base_case());  // capacity: 4 slots x page size 4 = 16
  set_i32(call.v.cache.seqlens, 1, 17);
  call.expect_refused(
      "cache.seqlens: expected values <= the capacity 16 (max_pages_per_seq 4 x page_size 4), got cache.seqlens[1] = 17");
  set_i32(call.v.cache.seqlens, 1, -1);
  call.expect_refused("cache.seqlens: expected values >= 0, got cache.seqlens[1] = -1");
}

TEST(KVCacheErrors, AppendThatWouldOverflowTheCache) {
  Call call(base_case());
  set_i32(call.v.cache.seqlens, 0, 15);
  call.expect_refused(
      "append.k: expected seqlen_new (shape[1]) = 2 new tokens to fit the cache after cache.seqlens[0] = 15 (capacity "
      "16 (max_pages_per_seq 4 x page_size 4)), got 15 + 2 = 17 tokens");
  KVCase contiguous = base_case(0);  // capacity = longest (11) + spare (2) = 13
  Call flat(contiguous);
  set_i32(flat.v.cache.seqlens, 1, 12);
  flat.expect_refused("got 12 + 2 = 14 tokens");
  set_i32(flat.v.cache.seqlens, 1, 14);
  flat.expect_refused("cache.seqlens: expected values <= the capacity 13 (cache.k shape[1]), got cache.seqlens[1] = 14");
}

// ---- shapes, dtypes, devices ----------------------------------------------------------------

TEST(KVCacheErrors, Query) {
  Call call(base_case());
  TensorView q = call.v.q;
  call.v.q.rank = 3;
  call.expect_refused("q: expected rank 4 [batch, seqlen_q, num_heads, head_dim], got rank 3");
  call.v.q = q;
  call.v.q.dtype = DType::i32;
  call.expect_refused("q: expected dtype f32, f16 or bf16, got dtype i32");
  call.v.q = q;
  call.v.q.shape[3] = 36;
  call.expect_refused("q: expected head_dim (shape[3]) a multiple of 8 in [8, 256], got 36");
  call.v.q = q;
  call.v.q.stride[3] = 2;
  call.v.q.shape[3] = 32;
  call.expect_refused("q: expected a contiguous head_dim (stride[3] = 1), got stride 2");
  call.v.q = q;
  call.v.q.shape[2] = 5;  // 5 query heads over 2 KV heads
  call.expect_refused("cache.k: expected num_kv_heads (shape[2]) dividing q's num_heads = 5, got 2");
}

TEST(KVCacheErrors, Cache) {
  Call call(base_case());
  const KVCache cache = call.v.cache;
  call.v.cache.k.dtype = DType::f16;
  call.expect_refused("cache.k: expected dtype bf16 (as q), got dtype f16");
  call.v.cache = cache;
  call.v.cache.k.device = Device::cuda(0);
  call.expect_refused("cache.k: expected device cpu (the device of q), got device cuda:0");
  call.v.cache = cache;
  call.v.cache.k.shape[3] = 32;
  call.expect_refused("cache.k: expected head_dim shape[3] = 64 (as q), got 32");
  call.v.cache = cache;
  call.v.cache.v.shape[1] = 3;  // k and v caches of different shapes
  call.expect_refused("cache.v: expected shape [7, 4, 2, 64] (as cache.k), got shape [7, 3, 2, 64]");
  call.v.cache = cache;
  call.v.cache.k.shape[1] = 0;
  call.v.cache.v.shape[1] = 0;
  call.expect_refused("cache.k: expected page_size (shape[1]) >= 1 for a paged cache, got 0");
  call.v.cache = cache;
  call.v.cache.k.rank = 3;
  call.expect_refused("cache.k: expected rank 4 [num_pages, page_size, num_kv_heads, head_dim] (paged cache), got rank 3");

  Call flat(base_case(0));
  flat.v.cache.k.shape[0] = 3;
  flat.v.cache.v.shape[0] = 3;
  flat.expect_refused("cache.k: expected batch shape[0] = 2 (as q) for a contiguous cache, got 3");
}

TEST(KVCacheErrors, SeqlensAndBlockTable) {
  Call call(base_case());
  const KVCache cache = call.v.cache;
  call.v.cache.seqlens.dtype = DType::f32;
  call.expect_refused("cache.seqlens: expected dtype i32, got dtype f32");
  call.v.cache = cache;
  call.v.cache.seqlens.shape[0] = 1;
  call.expect_refused("cache.seqlens: expected shape [2] ([batch] of q), got shape [1]");
  call.v.cache = cache;
  call.v.cache.seqlens.stride[0] = 2;
  call.expect_refused("cache.seqlens: expected a contiguous last dimension (stride[0] = 1), got stride 2");
  call.v.cache = cache;
  call.v.cache.block_table->dtype = DType::f32;
  call.expect_refused("cache.block_table: expected dtype i32, got dtype f32");
  call.v.cache = cache;
  call.v.cache.block_table->shape[0] = 1;
  call.expect_refused("cache.block_table: expected batch shape[0] = 2 (as q), got 1");
  call.v.cache = cache;
  call.v.cache.block_table->rank = 1;
  call.expect_refused("cache.block_table: expected rank 2 [batch, max_pages_per_seq], got rank 1");
}

TEST(KVCacheErrors, OutputsAndAppend) {
  Call call(base_case());
  const KVData::Views views = call.v;
  call.v.out.dtype = DType::f16;
  call.expect_refused("out: expected dtype bf16 (as q), got dtype f16");
  call.v = views;
  call.v.out.shape[1] = 3;
  call.expect_refused("out: expected shape [2, 2, 4, 64] (as q), got shape [2, 3, 4, 64]");
  call.v = views;
  call.v.out = call.v.q;
  call.expect_refused("out: expected memory that does not overlap q, got an overlapping range");
  call.v = views;
  call.v.lse->shape[2] = 1;
  call.expect_refused("lse: expected shape [2, 4, 2] ([batch, num_heads, seqlen_q]), got shape [2, 4, 1]");
  call.v = views;
  call.v.lse->dtype = DType::bf16;
  call.expect_refused("lse: expected dtype f32, got dtype bf16");
  call.v = views;
  call.v.append->k.shape[2] = 1;
  call.expect_refused("append.k: expected shape [2, 2, 2, 64] ([batch of q, seqlen_new, num_kv_heads and head_dim of cache.k]), got shape [2, 2, 1, 64]");
  call.v = views;
  call.v.append->v.shape[1] = 1;
  call.expect_refused("append.v: expected shape [2, 2, 2, 64] (as append.k), got shape [2, 1, 2, 64]");
  call.v = views;
  call.v.append->k.dtype = DType::f32;
  call.expect_refused("append.k: expected dtype bf16 (as q), got dtype f32");
  // The cache is written by an append: it must not overlap what the call reads.
  call.v = views;
  call.v.append->k = call.v.cache.k;
  call.v.append->k.shape[0] = 2;
  call.v.append->k.shape[1] = 2;
  call.v.append->v = call.v.append->k;
  call.expect_refused("cache.k: expected memory that does not overlap append.k, got an overlapping range");
}

TEST(KVCacheErrors, Options) {
  Call call(base_case());
  call.options.alignment = MaskAlignment::top_left;
  call.expect_refused(
      "options.alignment: expected bottom_right (KV-cache calls align the causal mask and window to the end of the "
      "cache), got top_left");
  call.options = call.data.options(Backend::cpu);
  call.options.cu_seqlens_q = call.v.cache.seqlens;
  call.expect_refused("options.cu_seqlens_q: expected none (a KV-cache call takes its lengths from cache.seqlens), got a tensor");
  call.options = call.data.options(Backend::cpu);
  call.options.cu_seqlens_k = call.v.cache.seqlens;
  call.expect_refused("options.cu_seqlens_k: expected none");
  call.options = call.data.options(Backend::cpu);
  call.options.max_seqlen_k = 100;
  call.expect_refused("options.max_seqlen_k: expected 0 (not used by KV-cache calls; see KVCacheShape::max_cache_len), got 100");
  call.options = call.data.options(Backend::cpu);
  call.options.window_right = 2;
  call.expect_refused("options.window_right: expected -1 or 0 with causal, got 2");
  call.options = call.data.options(Backend::cpu);
  call.options.softcap = -1.0f;
  call.expect_refused("options.softcap: expected 0 (off) or a finite positive value, got -1.000000");
  call.options = call.data.options(Backend::cpu);
  call.options.backend = Backend::cuda;
  call.expect_refused("options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda");
}

TEST(KVCacheErrors, CudaTensorsWithoutCuda) {
  if (build_info().cuda_compiled) GTEST_SKIP() << "this build has CUDA";
  Call call(base_case());
  for (TensorView* t : {&call.v.q, &call.v.out, &*call.v.lse, &call.v.cache.k, &call.v.cache.v, &call.v.cache.seqlens,
                        &*call.v.cache.block_table, &call.v.append->k, &call.v.append->v}) {
    t->device = Device::cuda(0);
  }
  call.expect_refused("q: expected a cpu tensor (fastattn was built without CUDA), got device cuda:0", ErrorCode::unsupported);
}

// ---- plans -----------------------------------------------------------------------------------

TEST(KVCacheErrors, PlanShape) {
  KVCacheShape s;
  s.dtype = DType::bf16;
  s.batch = 2;
  s.num_heads = 8;
  s.num_kv_heads = 3;
  s.head_dim = 64;
  s.capacity = 100;
  expect_error([&] { KVCachePlan plan(s); }, ErrorCode::invalid_argument,
               "shape.num_kv_heads: expected a divisor of num_heads = 8, got 3");
  s.num_kv_heads = 2;
  s.paged = true;
  expect_error([&] { KVCachePlan plan(s); }, ErrorCode::invalid_argument, "shape.page_size: expected >= 1, got 0");
  s.page_size = 16;
  s.max_cache_len = -1;
  expect_error([&] { KVCachePlan plan(s); }, ErrorCode::invalid_argument, "shape.max_cache_len: expected >= 0, got -1");
  s.max_cache_len = 0;
  s.dtype = DType::i32;
  expect_error([&] { KVCachePlan plan(s); }, ErrorCode::invalid_argument, "shape.dtype: expected f32, f16 or bf16, got i32");
  s.dtype = DType::bf16;
  AttentionOptions o;
  o.alignment = MaskAlignment::top_left;
  expect_error([&] { KVCachePlan plan(s, o); }, ErrorCode::invalid_argument, "options.alignment: expected bottom_right");
  EXPECT_NO_THROW(KVCachePlan plan(s));
}

TEST(KVCacheErrors, PlanRunChecksViewsNotValues) {
  Call call(base_case());
  const KVCachePlan plan(kv_cache_shape(call.v.q, call.v.cache, call.v.lse, call.v.append), call.options);
  KVData::Views wrong = call.v;
  wrong.cache.k.shape[0] = 6;
  wrong.cache.v.shape[0] = 6;
  expect_error([&] { plan.run(wrong.q, wrong.cache, wrong.out, wrong.lse, wrong.append); }, ErrorCode::invalid_argument,
               "cache.k: expected num_pages (shape[0]) = 7 (the plan's), got 6");
  wrong = call.v;
  wrong.append.reset();
  expect_error([&] { plan.run(wrong.q, wrong.cache, wrong.out, wrong.lse, wrong.append); }, ErrorCode::invalid_argument,
               "append.k: expected seqlen_new (shape[1]; 0: no append) = 2 (the plan's), got 0");
  // Out-of-range values are the caller's bug in a run: not checked, clamped, nothing outside
  // the cache read or written (the guards of the cache tensors stay intact).
  set_i32(call.v.cache.seqlens, 0, 1000);
  set_i32(*call.v.cache.block_table, 0, 1 << 20);
  EXPECT_NO_THROW(plan.run(call.v.q, call.v.cache, call.v.out, call.v.lse, call.v.append));
  EXPECT_EQ(call.data.k_cache.count_guard_clobbered(), 0);
  EXPECT_EQ(call.data.v_cache.count_guard_clobbered(), 0);
}

}  // namespace
}  // namespace fastattn::testing
