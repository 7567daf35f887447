// cooperative_kv_cache_call_test.cpp — attention_with_kv_cache over a CooperativeKVCache (CPU
// emulation): a decode loop through it gives the bits of cooperative_attention with the new
// token passed beside the cache and appended afterwards, matches one forward() over the whole
// sequence in float64 tolerance, and a full cache writes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/dtype.hpp"
#include "cooperative_support.hpp"
#include "fastattn/fastattn.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using testing::expect_error;

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(dist(gen));
  return v;
}

CooperativeCacheConfig config(std::int64_t kvh, std::int64_t d, std::int64_t ps, std::int64_t device_pages,
                              std::int64_t host_pages) {
  return testing::cache_config(DType::bf16, kvh, d, ps, device_pages, 1, host_pages);
}

CooperativeOptions given_rates() {
  CooperativeOptions o;
  o.rates = testing::rates(50e9, 80e9, 60e9);
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.5;
  o.attention.causal = true;
  return o;
}

TEST(CooperativeKVCacheCall, DecodeLoopAppendsAndMatchesForward) {
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16, prompt = 70, steps = 12;
  std::mt19937 gen(5);
  CooperativeKVCache cache(config(kvh, d, ps, 2, 8));
  CooperativeKVCache twin(config(kvh, d, ps, 2, 8));
  const std::int64_t total = prompt + steps;
  const auto k = random_bf16(static_cast<std::size_t>(total * kvh * d), gen);
  const auto v = random_bf16(k.size(), gen);
  auto kv = [&](const std::vector<std::uint16_t>& x, std::int64_t t0, std::int64_t n) {
    return make_tensor(const_cast<std::uint16_t*>(x.data() + t0 * kvh * d), DType::bf16, {1, n, kvh, d});
  };
  cache.append(0, kv(k, 0, prompt), kv(v, 0, prompt));
  twin.append(0, kv(k, 0, prompt), kv(v, 0, prompt));
  const CooperativeOptions o = given_rates();
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t t = prompt + s;
    const auto q = random_bf16(static_cast<std::size_t>(h * d), gen);
    const TensorView Q = make_tensor(const_cast<std::uint16_t*>(q.data()), DType::bf16, {1, 1, h, d});
    std::vector<std::uint16_t> out(q.size(), 0x7fc0), ref(q.size(), 0x7fc0), whole(q.size(), 0x7fc0);
    attention_with_kv_cache(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, 1, h, d}), std::nullopt,
                            KVAppend{kv(k, t, 1), kv(v, t, 1)}, o);
    EXPECT_EQ(cache.length(0), t + 1);
    // The same step by hand: the new token beside the cache, then appended.
    cooperative_attention(Q, twin, 0, make_tensor(ref.data(), DType::bf16, {1, 1, h, d}), std::nullopt,
                          CooperativeNewKV{kv(k, t, 1), kv(v, t, 1)}, o);
    twin.append(0, kv(k, t, 1), kv(v, t, 1));
    EXPECT_EQ(0, std::memcmp(out.data(), ref.data(), out.size() * 2)) << "step " << s;
    // One forward() over the whole sequence so far (one query at its end).
    forward(Q, kv(k, 0, t + 1), kv(v, 0, t + 1), make_tensor(whole.data(), DType::bf16, {1, 1, h, d}));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const float a = bf16_to_float(out[i]), b = bf16_to_float(whole[i]);
      ASSERT_FALSE(std::isnan(a)) << "step " << s;
      EXPECT_NEAR(a, b, 2e-2f + 2e-2f * std::fabs(b)) << "step " << s << " element " << i;
    }
  }
}

TEST(CooperativeKVCacheCall, FullCacheWritesNothing) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16;
  std::mt19937 gen(6);
  CooperativeKVCache cache(config(kvh, d, ps, 1, 1));  // 2 pages: 32 tokens
  const auto k = random_bf16(static_cast<std::size_t>(40 * kvh * d), gen);
  cache.append(0, make_tensor(const_cast<std::uint16_t*>(k.data()), DType::bf16, {1, 30, kvh, d}),
               make_tensor(const_cast<std::uint16_t*>(k.data()), DType::bf16, {1, 30, kvh, d}));
  const auto q = random_bf16(static_cast<std::size_t>(3 * h * d), gen);
  std::vector<std::uint16_t> out(q.size(), 0x1234);
  const TensorView new_k = make_tensor(const_cast<std::uint16_t*>(k.data()), DType::bf16, {1, 3, kvh, d});
  expect_error(
      [&] {
        attention_with_kv_cache(make_tensor(const_cast<std::uint16_t*>(q.data()), DType::bf16, {1, 3, h, d}), cache, 0,
                                make_tensor(out.data(), DType::bf16, {1, 3, h, d}), std::nullopt, KVAppend{new_k, new_k},
                                given_rates());
      },
      ErrorCode::out_of_memory, "append: expected at most 2 new tokens");
  EXPECT_EQ(cache.length(0), 30);
  for (std::uint16_t x : out) EXPECT_EQ(x, 0x1234);
  expect_error(
      [&] {
        attention_with_kv_cache(make_tensor(const_cast<std::uint16_t*>(q.data()), DType::bf16, {1, 1, h, d}), cache, 2,
                                make_tensor(out.data(), DType::bf16, {1, 1, h, d}));
      },
      ErrorCode::invalid_argument, "seq: expected a sequence id in [0, 1)");
}

}  // namespace
}  // namespace fastattn
