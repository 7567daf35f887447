// cooperative_cache_test.cpp — the cooperative KV cache's bookkeeping (fastattn/cooperative.hpp:
// CooperativeKVCache) on the CPU: appends across the device/host boundary, a full cache writing
// nothing, bad page ids and shared pages.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fastattn/fastattn.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using testing::expect_error;

// f32, 2 KV heads, d 4, pages of 4 tokens: a token is 8 floats, a page (K+V) 256 bytes.
CooperativeCacheConfig small_config(std::int64_t device_pages, std::int64_t host_pages, std::int64_t staging = 1) {
  CooperativeCacheConfig c;
  c.dtype = DType::f32;
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.page_size = 4;
  c.max_sequences = 2;
  c.staging_pages = staging;
  c.host_pages = host_pages;
  c.device_budget_bytes = static_cast<std::size_t>((device_pages + (host_pages > 0 ? 2 * staging : 0)) * 256);
  return c;
}

std::vector<float> tokens(std::int64_t n, float base) {
  std::vector<float> v(static_cast<std::size_t>(n * 8));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = base + static_cast<float>(i);
  return v;
}

float key_at(const CooperativeKVCache& cache, std::int64_t seq, std::int64_t token, int element) {
  const std::int32_t page = cache.pages(seq)[static_cast<std::size_t>(token / 4)];
  const bool dev = cache.tier(page) == PageTier::device;
  const TensorView pool = cache.pool_k(dev ? PageTier::device : PageTier::host);
  const std::int64_t local = dev ? page : page - cache.device_pages();
  return static_cast<const float*>(pool.data)[(local * 4 + token % 4) * 8 + element];
}

TEST(CooperativeCache, AppendCrossesTheDeviceHostBoundary) {
  CooperativeKVCache cache(small_config(3, 5));
  EXPECT_EQ(cache.device_pages(), 3);
  EXPECT_EQ(cache.host_pages(), 5);
  EXPECT_EQ(cache.device_bytes(), 5u * 256u);  // 3 pages + 2 staging pages
  auto k = tokens(10, 0), v = tokens(10, 1000);
  cache.append(0, make_tensor(k.data(), DType::f32, {10, 2, 4}), make_tensor(v.data(), DType::f32, {10, 2, 4}));
  auto k2 = tokens(5, 5000), v2 = tokens(5, 6000);
  cache.append(0, make_tensor(k2.data(), DType::f32, {1, 5, 2, 4}), make_tensor(v2.data(), DType::f32, {1, 5, 2, 4}));
  EXPECT_EQ(cache.length(0), 15);
  ASSERT_EQ(cache.pages(0).size(), 4u);
  EXPECT_EQ(cache.tier(cache.pages(0)[2]), PageTier::device);
  EXPECT_EQ(cache.tier(cache.pages(0)[3]), PageTier::host);
  EXPECT_EQ(cache.free_pages(PageTier::device), 0);
  EXPECT_EQ(cache.free_pages(PageTier::host), 4);
  EXPECT_EQ(key_at(cache, 0, 9, 3), 9 * 8 + 3);           // first append, device page 2
  EXPECT_EQ(key_at(cache, 0, 11, 0), 5000 + 1 * 8);        // second append's token 1, device page 2
  EXPECT_EQ(key_at(cache, 0, 14, 7), 5000 + 4 * 8 + 7);    // host page
  cache.release(0);
  EXPECT_EQ(cache.free_pages(PageTier::device), 3);
  EXPECT_EQ(cache.free_pages(PageTier::host), 5);
}

TEST(CooperativeCache, FullCacheWritesNothing) {
  CooperativeKVCache cache(small_config(1, 1));
  auto k = tokens(6, 0);
  cache.append(1, make_tensor(k.data(), DType::f32, {6, 2, 4}), make_tensor(k.data(), DType::f32, {6, 2, 4}));
  auto more = tokens(3, 100);
  expect_error([&] { cache.append(1, make_tensor(more.data(), DType::f32, {3, 2, 4}), make_tensor(more.data(), DType::f32, {3, 2, 4})); },
               ErrorCode::out_of_memory, "cache is full");
  EXPECT_EQ(cache.length(1), 6);
  EXPECT_EQ(cache.pages(1).size(), 2u);
  EXPECT_EQ(key_at(cache, 1, 5, 0), 5 * 8);
  expect_error([&] { cache.append(2, make_tensor(more.data(), DType::f32, {3, 2, 4}), make_tensor(more.data(), DType::f32, {3, 2, 4})); },
               ErrorCode::invalid_argument, "seq: expected a sequence id in [0, 2)");
  expect_error([&] { cache.append(0, make_tensor(more.data(), DType::f32, {3, 4, 2}), make_tensor(more.data(), DType::f32, {3, 4, 2})); },
               ErrorCode::invalid_argument, "k: expected [.., 2, 4]");
  expect_error([] { CooperativeCacheConfig c = small_config(0, 4, 2); c.device_budget_bytes = 100; CooperativeKVCache bad(c); },
               ErrorCode::invalid_argument, "config.device_budget_bytes");
}

TEST(CooperativeCache, BadPageIds) {
  CooperativeKVCache cache(small_config(2, 2));
  expect_error([&] { cache.set_pages(0, {0, 7}, 8); }, ErrorCode::invalid_argument, "pages[1]: expected a page id in [0, 4)");
  expect_error([&] { cache.set_pages(0, {-1}, 4); }, ErrorCode::invalid_argument, "pages[0]");
  expect_error([&] { cache.set_pages(0, {1, 1}, 8); }, ErrorCode::invalid_argument, "page 1 twice");
  expect_error([&] { cache.set_pages(0, {1}, 5); }, ErrorCode::invalid_argument, "2 page ids for 5 tokens");
  expect_error([&] { (void)cache.tier(4); }, ErrorCode::invalid_argument, "page");
  EXPECT_EQ(cache.free_pages(PageTier::device), 2);
  // A shared prompt: both sequences hold page 2 (host); appending into it is refused.
  cache.set_pages(0, {0, 2}, 6);
  cache.set_pages(1, {1, 2}, 6);
  EXPECT_EQ(cache.free_pages(PageTier::host), 1);
  auto k = tokens(1, 0);
  expect_error([&] { cache.append(1, make_tensor(k.data(), DType::f32, {1, 2, 4}), make_tensor(k.data(), DType::f32, {1, 2, 4})); },
               ErrorCode::invalid_argument, "shared page");
  cache.release(0);
  EXPECT_EQ(cache.free_pages(PageTier::host), 1);  // still held by sequence 1
  cache.release(1);
  EXPECT_EQ(cache.free_pages(PageTier::host), 2);
}

}  // namespace
}  // namespace fastattn
