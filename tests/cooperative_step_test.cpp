// cooperative_step_test.cpp — the cooperative step (fastattn/cooperative.hpp) in the CPU
// emulation: the three-way split (the "GPU" parts run by the CPU kernels, through the same
// staging chunks and merge) against float64 and against one single call over the same data,
// prefill with the forward kernel over fragmented device pages, the exactness bar (no larger
// error than one call), and the reusable CooperativeStep object.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cooperative_support.hpp"
#include "fastattn/fastattn.hpp"
#include "test_support.hpp"

namespace fastattn {
namespace {

using testing::expect_error;
using testing::rates;

struct Data {
  std::vector<std::uint16_t> k, v, q;  // bf16: [L, kvh, d], [L, kvh, d], [sq, h, d]
};

// float64 attention of q over keys 0..L-1 (all visible) then `n_new` new ones (causal among
// themselves, bottom-right, when causal): out [sq, h, d], lse [h, sq].
void reference(const Data& x, const std::vector<std::uint16_t>& kn, const std::vector<std::uint16_t>& vn,
               std::int64_t L, std::int64_t n_new, std::int64_t sq, std::int64_t h, std::int64_t kvh, std::int64_t d,
               bool causal, std::vector<double>& out, std::vector<double>& lse) {
  out.assign(static_cast<std::size_t>(sq * h * d), 0.0);
  lse.assign(static_cast<std::size_t>(h * sq), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t t = 0; t < sq; ++t) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t g = hh / (h / kvh);
      std::vector<double> s;
      std::vector<const std::uint16_t*> vs;
      auto add = [&](const std::uint16_t* kr, const std::uint16_t* vr) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e) dot += bf16_to_float(x.q[static_cast<std::size_t>((t * h + hh) * d + e)]) * bf16_to_float(kr[e]);
        s.push_back(dot * scale);
        vs.push_back(vr);
      };
      for (std::int64_t j = 0; j < L; ++j) add(&x.k[static_cast<std::size_t>((j * kvh + g) * d)], &x.v[static_cast<std::size_t>((j * kvh + g) * d)]);
      for (std::int64_t j = 0; j < n_new; ++j) {
        if (causal && j > n_new - sq + t) continue;
        add(&kn[static_cast<std::size_t>((j * kvh + g) * d)], &vn[static_cast<std::size_t>((j * kvh + g) * d)]);
      }
      double m = -INFINITY;
      for (double e : s) m = std::max(m, e);
      double sum = 0;
      for (double e : s) sum += std::exp(e - m);
      for (std::size_t j = 0; j < s.size(); ++j) {
        const double p = std::exp(s[j] - m) / sum;
        for (std::int64_t e = 0; e < d; ++e) out[static_cast<std::size_t>((t * h + hh) * d + e)] += p * bf16_to_float(vs[j][e]);
      }
      lse[static_cast<std::size_t>(hh * sq + t)] = m + std::log(sum);
    }
  }
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<std::uint16_t> v(n);
  for (auto& e : v) e = float_to_bf16(dist(gen) + 0.01f);
  return v;
}

double max_error(const std::vector<std::uint16_t>& out, const std::vector<double>& ref) {
  double e = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double x = bf16_to_float(out[i]);
    if (std::isnan(x)) return INFINITY;
    e = std::max(e, std::abs(x - ref[i]));
  }
  return e;
}

struct SplitCase {
  std::int64_t length, seqlen_q, device_pages, staging_pages;
  double stream_fraction;
  std::int64_t n_new;
};

class CooperativeSplitExact : public ::testing::TestWithParam<SplitCase> {};

TEST_P(CooperativeSplitExact, ThreeWaysVsFloat64AndOneCall) {
  const SplitCase sc = GetParam();
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16;
  const std::int64_t L = sc.length, sq = sc.seqlen_q;
  std::mt19937 gen(static_cast<unsigned>(L * 31 + sq));
  Data x{random_bf16(static_cast<std::size_t>(L * kvh * d), gen), random_bf16(static_cast<std::size_t>(L * kvh * d), gen),
         random_bf16(static_cast<std::size_t>(sq * h * d), gen)};
  const CooperativeCacheConfig c =
      testing::cache_config(DType::bf16, kvh, d, ps, sc.device_pages, sc.staging_pages, (L + ps - 1) / ps);
  CooperativeKVCache cache(c);
  // Appended in two uneven calls, so pages fill across a call boundary too.
  const std::int64_t first = L / 3;
  cache.append(0, make_tensor(x.k.data(), DType::bf16, {first, kvh, d}), make_tensor(x.v.data(), DType::bf16, {first, kvh, d}));
  cache.append(0, make_tensor(x.k.data() + first * kvh * d, DType::bf16, {L - first, kvh, d}),
               make_tensor(x.v.data() + first * kvh * d, DType::bf16, {L - first, kvh, d}));
  auto kn = random_bf16(static_cast<std::size_t>(std::max<std::int64_t>(sc.n_new, 1) * kvh * d), gen);
  auto vn = random_bf16(kn.size(), gen);

  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = sc.stream_fraction;
  o.attention.causal = true;
  o.rates = rates(50e9, 80e9, 60e9);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fc0);  // poisoned: NaN
  std::vector<float> lse(static_cast<std::size_t>(h * sq), NAN);
  const TensorView Q = make_tensor(x.q.data(), DType::bf16, {1, sq, h, d});
  std::optional<CooperativeNewKV> fresh;
  if (sc.n_new > 0) {
    fresh = CooperativeNewKV{make_tensor(kn.data(), DType::bf16, {1, sc.n_new, kvh, d}),
                             make_tensor(vn.data(), DType::bf16, {1, sc.n_new, kvh, d})};
  }
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, sq, h, d}),
                                                    make_tensor(lse.data(), DType::f32, {1, h, sq}), fresh, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  EXPECT_EQ(split.device_pages, std::min(sc.device_pages, c.host_pages));
  if (sc.stream_fraction > 0 && sc.stream_fraction < 1 && c.host_pages - sc.device_pages >= 2) {
    EXPECT_GT(split.streamed_pages, 0);
    EXPECT_GT(split.cpu_pages, 0);
  }
  std::vector<double> ref_out, ref_lse;
  reference(x, kn, vn, L, sc.n_new, sq, h, kvh, d, true, ref_out, ref_lse);

  // One single call over the same data: all pages of one paged cache, new tokens appended in it.
  std::vector<std::uint16_t> k_all(x.k), v_all(x.v);
  k_all.insert(k_all.end(), kn.begin(), kn.begin() + sc.n_new * kvh * d);
  v_all.insert(v_all.end(), vn.begin(), vn.begin() + sc.n_new * kvh * d);
  const std::int64_t total = L + sc.n_new;
  std::vector<std::uint16_t> one(out.size());
  std::vector<float> one_lse(lse.size());
  AttentionOptions a;
  a.causal = true;
  forward(Q, make_tensor(k_all.data(), DType::bf16, {1, total, kvh, d}), make_tensor(v_all.data(), DType::bf16, {1, total, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, sq, h, d}), make_tensor(one_lse.data(), DType::f32, {1, h, sq}), a);

  const double err = max_error(out, ref_out);
  const double err_one = max_error(one, ref_out);
  double lse_err = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(static_cast<double>(lse[i]) - ref_lse[i]));
  EXPECT_LE(err, 2 * err_one + 1e-3) << choice.reason << " err " << err << " one call " << err_one;
  EXPECT_LE(lse_err, 1e-4) << choice.reason;
  RecordProperty("err_vs_f64", std::to_string(err));
  RecordProperty("one_call_err_vs_f64", std::to_string(err_one));
}

INSTANTIATE_TEST_SUITE_P(Cases, CooperativeSplitExact,
                         ::testing::Values(SplitCase{1000, 1, 20, 3, 0.5, 0},   // 63 pages: 20 / 21 / 22, 7 chunks
                                           SplitCase{1000, 1, 20, 3, 0.5, 1},   // a decode token not yet appended
                                           SplitCase{257, 4, 5, 2, 0.3, 4},     // speculative: 4 causal drafts
                                           SplitCase{65, 1, 1, 1, 1.0, 0},      // all host pages streamed
                                           SplitCase{63, 7, 0, 2, 0.0, 7},      // no device page, CPU alone
                                           SplitCase{7, 1, 4, 1, 0.5, 0},       // fits on the device
                                           SplitCase{4096, 16, 64, 8, 0.6, 0},
                                           // prefill (seqlen_q > 16): forward() over the device run and the chunks
                                           SplitCase{1000, 65, 20, 3, 0.5, 65},  // chunked prefill: own chunk causal
                                           SplitCase{999, 100, 13, 5, 0.4, 0}));

// Prefill with the forward kernel over fragmented device pages (a caller's page table, pages
// out of order: several device runs) split three ways: vs float64 and vs one forward() call.
// Parts 1 and 2 write q's dtype (forward's out), one rounding per run or chunk before the f32
// merge, so the bound is the harness's 2x of a same-precision call (plus a floor), not 1x.
TEST(CooperativePrefill, ForwardKernelOverDeviceRunsAndChunks) {
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16, L = 1000, sq = 33, pages = (L + ps - 1) / ps;  // 63 pages
  std::mt19937 gen(17);
  Data x{random_bf16(static_cast<std::size_t>(L * kvh * d), gen), random_bf16(static_cast<std::size_t>(L * kvh * d), gen),
         random_bf16(static_cast<std::size_t>(sq * h * d), gen)};
  const CooperativeCacheConfig c = testing::cache_config(DType::bf16, kvh, d, ps, 20, 8, pages);  // 20 device pages
  CooperativeKVCache cache(c);
  // Token-order page table: device pages 3,4,5, 0,1, 9..19 (3 runs) interleaved with host pages.
  std::vector<std::int32_t> table;
  for (std::int32_t p : {3, 4, 5, 0, 1}) table.push_back(p);
  for (std::int32_t p = 20; p < 50; ++p) table.push_back(p);
  for (std::int32_t p = 9; p < 20; ++p) table.push_back(p);
  for (std::int32_t p = 50; static_cast<std::int64_t>(table.size()) < pages; ++p) table.push_back(p);
  cache.set_pages(0, table, L);
  for (std::int64_t j = 0; j < pages; ++j) {  // the keys in token order, through the page table
    const std::int64_t n = std::min(ps, L - j * ps);
    const TensorView kp = cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? cache.pool_k(PageTier::device) : cache.pool_k(PageTier::host);
    const TensorView vp = cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? cache.pool_v(PageTier::device) : cache.pool_v(PageTier::host);
    const std::int64_t local = table[static_cast<std::size_t>(j)] - (cache.tier(table[static_cast<std::size_t>(j)]) == PageTier::device ? 0 : cache.device_pages());
    const std::size_t bytes = static_cast<std::size_t>(n * kvh * d * 2), at = static_cast<std::size_t>(local * ps * kvh * d * 2);
    std::memcpy(static_cast<char*>(kp.data) + at, x.k.data() + j * ps * kvh * d, bytes);
    std::memcpy(static_cast<char*>(vp.data) + at, x.v.data() + j * ps * kvh * d, bytes);
  }
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.6;
  o.rates = rates(50e9, 80e9, 60e9);
  const TensorView Q = make_tensor(x.q.data(), DType::bf16, {1, sq, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fc0);  // poisoned: NaN
  std::vector<float> lse(static_cast<std::size_t>(h * sq), NAN);
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, sq, h, d}),
                                                    make_tensor(lse.data(), DType::f32, {1, h, sq}), std::nullopt, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  EXPECT_EQ(split.gpu_kernel, CooperativeKernel::forward);
  EXPECT_EQ(split.device_pages, 16);
  EXPECT_EQ(split.streamed_pages, 28);  // 0.6 x 47 host pages: chunks of 8, 8, 8, 4
  EXPECT_EQ(split.cpu_pages, 19);
  EXPECT_NE(choice.reason.find("forward kernel over each run of consecutive device pages"), std::string::npos) << choice.reason;
  std::vector<double> ref_out, ref_lse;
  reference(x, {}, {}, L, 0, sq, h, kvh, d, false, ref_out, ref_lse);
  std::vector<std::uint16_t> one(out.size(), 0x7fc0);
  forward(Q, make_tensor(x.k.data(), DType::bf16, {1, L, kvh, d}), make_tensor(x.v.data(), DType::bf16, {1, L, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, sq, h, d}));
  const double err = max_error(out, ref_out), err_one = max_error(one, ref_out);
  double lse_err = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) lse_err = std::max(lse_err, std::abs(static_cast<double>(lse[i]) - ref_lse[i]));
  EXPECT_LE(err, 2 * err_one + 1e-3) << "err " << err << " one call " << err_one << "; " << choice.reason;
  EXPECT_LE(lse_err, 1e-4);
  std::printf("prefill split / one call max error: %.4f (%.3e / %.3e)\n", err / err_one, err, err_one);
}

// Issue 18's exactness bar: the three-way split's max error vs float64 no larger than that of one
// single-device call (forward() over the same keys), bf16 and f16, several seeds and sizes.
// Each part writes its partial in f32 (PartialRunner) and the step rounds once, after the merge,
// so both results are one rounding of (nearly) the same f32 value and the mean error is no
// larger. The max error can still differ by a fraction of an ulp: an f32 value a few f32 ulps
// from a rounding tie may round the other way than the single call's did (measured: max-error
// ratio 1.00 in 9 of these 10 cases, 1.12 in bf16 L 2047 sq 4 seed 4; mean-error ratio
// 0.96-1.00). Bounds: mean <= 1.01x, max <= 1.25x.
struct BarCase {
  DType dtype;
  std::int64_t length, seqlen_q;
  unsigned seed;
};

class CooperativeExactnessBar : public ::testing::TestWithParam<BarCase> {};

TEST_P(CooperativeExactnessBar, NoLargerThanOneCall) {
  const BarCase bc = GetParam();
  const std::int64_t kvh = 2, h = 8, d = 64, ps = 16;
  const std::int64_t L = bc.length, sq = bc.seqlen_q;
  const DType dt = bc.dtype;
  std::mt19937 gen(bc.seed * 7919u + static_cast<unsigned>(L));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  auto random = [&](std::int64_t n) {
    std::vector<std::uint16_t> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = dt == DType::bf16 ? float_to_bf16(dist(gen) + 0.01f) : float_to_f16(dist(gen) + 0.01f);
    return v;
  };
  const auto k = random(L * kvh * d), v = random(L * kvh * d), q = random(sq * h * d);
  auto at = [&](const std::vector<std::uint16_t>& x, std::int64_t i) { return load_element(x.data(), dt, i); };
  const std::int64_t pages = (L + ps - 1) / ps;
  const CooperativeCacheConfig c = testing::cache_config(dt, kvh, d, ps, pages / 3, 3, pages);
  CooperativeKVCache cache(c);
  cache.append(0, make_tensor(const_cast<std::uint16_t*>(k.data()), dt, {L, kvh, d}),
               make_tensor(const_cast<std::uint16_t*>(v.data()), dt, {L, kvh, d}));
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.5;
  o.rates = rates(50e9, 80e9, 60e9);
  const TensorView Q = make_tensor(const_cast<std::uint16_t*>(q.data()), dt, {1, sq, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(sq * h * d), 0x7fff);  // poisoned: NaN in both dtypes
  const KernelChoice choice = cooperative_attention(Q, cache, 0, make_tensor(out.data(), dt, {1, sq, h, d}), std::nullopt,
                                                    std::nullopt, o);
  const CooperativeSplit split = plan_cooperative_attention(Q, cache, 0, o);
  ASSERT_GT(split.device_pages, 0);
  ASSERT_GT(split.streamed_pages, 0);
  ASSERT_GT(split.cpu_pages, 0);
  std::vector<std::uint16_t> one(out.size(), 0x7fff);
  forward(Q, make_tensor(const_cast<std::uint16_t*>(k.data()), dt, {1, L, kvh, d}),
          make_tensor(const_cast<std::uint16_t*>(v.data()), dt, {1, L, kvh, d}), make_tensor(one.data(), dt, {1, sq, h, d}));
  // float64 reference.
  double err = 0, err_one = 0, sum_err = 0, sum_one = 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> s(static_cast<std::size_t>(L)), o64(static_cast<std::size_t>(d));
  for (std::int64_t t = 0; t < sq; ++t) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      const std::int64_t g = hh / (h / kvh);
      double m = -INFINITY;
      for (std::int64_t j = 0; j < L; ++j) {
        double dot = 0;
        for (std::int64_t e = 0; e < d; ++e) dot += at(q, (t * h + hh) * d + e) * at(k, (j * kvh + g) * d + e);
        s[static_cast<std::size_t>(j)] = dot * scale;
        m = std::max(m, dot * scale);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - m));
      std::fill(o64.begin(), o64.end(), 0.0);
      for (std::int64_t j = 0; j < L; ++j) {
        for (std::int64_t e = 0; e < d; ++e) o64[static_cast<std::size_t>(e)] += s[static_cast<std::size_t>(j)] / sum * at(v, (j * kvh + g) * d + e);
      }
      for (std::int64_t e = 0; e < d; ++e) {
        const std::int64_t i = (t * h + hh) * d + e;
        const double x = at(out, i), y = at(one, i);
        err = std::isnan(x) ? INFINITY : std::max(err, std::abs(x - o64[static_cast<std::size_t>(e)]));
        err_one = std::isnan(y) ? INFINITY : std::max(err_one, std::abs(y - o64[static_cast<std::size_t>(e)]));
        sum_err += std::abs(x - o64[static_cast<std::size_t>(e)]);
        sum_one += std::abs(y - o64[static_cast<std::size_t>(e)]);
      }
    }
  }
  EXPECT_LE(sum_err, sum_one * 1.01) << "mean error";
  EXPECT_LE(err, err_one * 1.25) << to_string(dt) << " L " << L << " sq " << sq << " seed " << bc.seed
                                       << ": split err " << err << ", one call " << err_one << "; " << choice.reason;
  EXPECT_GT(err_one, 0.0);
  RecordProperty("split_over_one_call", std::to_string(err / err_one));
  std::printf("split / one call error, %s L %ld sq %ld seed %u: max %.4f mean %.4f\n", to_string(dt), static_cast<long>(L), static_cast<long>(sq), bc.seed, err / err_one, sum_err / sum_one);
}

INSTANTIATE_TEST_SUITE_P(Cases, CooperativeExactnessBar,
                         ::testing::Values(BarCase{DType::bf16, 1000, 1, 1}, BarCase{DType::bf16, 1000, 1, 2},
                                           BarCase{DType::bf16, 4096, 1, 3}, BarCase{DType::bf16, 2047, 4, 4},
                                           BarCase{DType::bf16, 777, 16, 5}, BarCase{DType::f16, 1000, 1, 1},
                                           BarCase{DType::f16, 1000, 1, 2}, BarCase{DType::f16, 4096, 1, 3},
                                           BarCase{DType::f16, 2047, 4, 4}, BarCase{DType::f16, 777, 16, 5}));

// The step object (CooperativeStep): planned once, run as the sequence grows across the
// device/host boundary (the split moves: device pages first, then host pages streamed and on
// the CPU); every run bitwise equal to a one-shot cooperative_attention on the same cache.
TEST(CooperativeStep, ReusedAsTheSequenceGrows) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16, step_tokens = 40;
  std::mt19937 gen(11);
  const CooperativeCacheConfig c = testing::cache_config(DType::bf16, kvh, d, ps, 6, 2, 24);
  CooperativeKVCache cache(c);
  const auto q = random_bf16(static_cast<std::size_t>(h * d), gen);
  const TensorView Q = make_tensor(const_cast<std::uint16_t*>(q.data()), DType::bf16, {1, 1, h, d});
  CooperativeOptions o;
  o.policy = SplitPolicy::stream_fraction;
  o.stream_fraction = 0.5;
  o.rates = rates(50e9, 80e9, 60e9);
  CooperativeStep step(Q, cache, o);
  std::vector<std::uint16_t> out(static_cast<std::size_t>(h * d)), once(out.size());
  std::vector<float> lse(static_cast<std::size_t>(h)), lse_once(lse.size());
  bool saw_all_three = false;
  for (int i = 0; i < 10; ++i) {
    const auto k = random_bf16(static_cast<std::size_t>(step_tokens * kvh * d), gen);
    const auto v = random_bf16(k.size(), gen);
    cache.append(0, make_tensor(const_cast<std::uint16_t*>(k.data()), DType::bf16, {step_tokens, kvh, d}),
                 make_tensor(const_cast<std::uint16_t*>(v.data()), DType::bf16, {step_tokens, kvh, d}));
    std::fill(out.begin(), out.end(), 0x7fc0);
    std::fill(once.begin(), once.end(), 0x7fc0);
    step.run(Q, 0, make_tensor(out.data(), DType::bf16, {1, 1, h, d}), make_tensor(lse.data(), DType::f32, {1, h, 1}));
    cooperative_attention(Q, cache, 0, make_tensor(once.data(), DType::bf16, {1, 1, h, d}),
                          make_tensor(lse_once.data(), DType::f32, {1, h, 1}), std::nullopt, o);
    EXPECT_EQ(0, std::memcmp(out.data(), once.data(), out.size() * 2)) << "step " << i;
    EXPECT_EQ(0, std::memcmp(lse.data(), lse_once.data(), lse.size() * 4)) << "step " << i;
    for (std::uint16_t x : out) ASSERT_FALSE(std::isnan(bf16_to_float(x))) << "step " << i;
    const CooperativeSplit split = step.plan(0);
    EXPECT_EQ(split.device_pages, std::min<std::int64_t>(6, (cache.length(0) + ps - 1) / ps));
    saw_all_three = saw_all_three || (split.device_pages > 0 && split.streamed_pages > 0 && split.cpu_pages > 0);
  }
  EXPECT_TRUE(saw_all_three);
  // A q of another shape than the step's.
  std::vector<std::uint16_t> q2(static_cast<std::size_t>(2 * h * d), 0x3f80), o2(q2.size());
  expect_error([&] { step.run(make_tensor(q2.data(), DType::bf16, {1, 2, h, d}), 0, make_tensor(o2.data(), DType::bf16, {1, 2, h, d})); },
               ErrorCode::invalid_argument, "q: expected shape [1, 1, 4, 64] (the step's)");
}

TEST(CooperativeStep, PartsAloneAndErrors) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16, L = 100;
  std::mt19937 gen(3);
  auto k = random_bf16(static_cast<std::size_t>(L * kvh * d), gen), q = random_bf16(static_cast<std::size_t>(h * d), gen);
  const CooperativeCacheConfig c = testing::cache_config(DType::bf16, kvh, d, ps, 2, 1, 8);  // 2 device + 2 staging
  CooperativeKVCache cache(c);
  cache.append(0, make_tensor(k.data(), DType::bf16, {L, kvh, d}), make_tensor(k.data(), DType::bf16, {L, kvh, d}));
  const TensorView Q = make_tensor(q.data(), DType::bf16, {1, 1, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(h * d));
  std::vector<float> lse(static_cast<std::size_t>(h));
  CooperativeOptions o;
  o.rates = rates(50e9, 80e9, 60e9);
  o.parts = 1;  // the device part alone: attention over its 32 keys
  cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, 1, h, d}), make_tensor(lse.data(), DType::f32, {1, h, 1}), std::nullopt, o);
  std::vector<std::uint16_t> one(out.size());
  std::vector<float> one_lse(lse.size());
  forward(Q, make_tensor(k.data(), DType::bf16, {1, 32, kvh, d}), make_tensor(k.data(), DType::bf16, {1, 32, kvh, d}),
          make_tensor(one.data(), DType::bf16, {1, 1, h, d}), make_tensor(one_lse.data(), DType::f32, {1, h, 1}));
  for (std::size_t i = 0; i < lse.size(); ++i) EXPECT_NEAR(lse[i], one_lse[i], 1e-4);
  o.parts = 7;
  o.attention.window_left = 8;
  const TensorView O = make_tensor(out.data(), DType::bf16, {1, 1, h, d});
  expect_error([&] { cooperative_attention(Q, cache, 0, O, std::nullopt, std::nullopt, o); }, ErrorCode::unsupported,
               "options.attention.window_left/right");
  o.attention.window_left = -1;
  expect_error([&] { cooperative_attention(Q, cache, 1, O, std::nullopt, std::nullopt, o); }, ErrorCode::invalid_argument,
               "seq: expected a sequence id in [0, 1)");
  expect_error([&] { cooperative_attention(make_tensor(q.data(), DType::f16, {1, 1, h, d}), cache, 0, O, std::nullopt, std::nullopt, o); },
               ErrorCode::invalid_argument, "q: expected dtype bf16 (the cache's)");
  expect_error([&] { cooperative_attention(Q, cache, 0, make_tensor(out.data(), DType::bf16, {1, 1, h / 2, d}), std::nullopt, std::nullopt, o); },
               ErrorCode::invalid_argument, "out: expected shape");
  o.parts = 0;
  expect_error([&] { cooperative_attention(Q, cache, 0, O, std::nullopt, std::nullopt, o); }, ErrorCode::invalid_argument, "options.parts");
}

// CooperativeOptions::refine_rates: from the step's second run, a run of the automatic policy in
// which both host parts had pages and whose rates are more than 1.5x off the start rates (here
// the emulation's "PCIe", a memcpy and CPU attention, against a given 50 GB/s) replaces them
// with its own, as last_times() reports them; the first run never does (its one-off costs); off,
// or with a forced split, the rates stay as given.
TEST(CooperativeStep, RefinesItsRatesFromItsRuns) {
  const std::int64_t kvh = 2, h = 4, d = 64, ps = 16, L = 250;
  std::mt19937 gen(5);
  auto k = random_bf16(static_cast<std::size_t>(L * kvh * d), gen), q = random_bf16(static_cast<std::size_t>(h * d), gen);
  const CooperativeCacheConfig c = testing::cache_config(DType::bf16, kvh, d, ps, 2, 1, 16);  // 2 device + 14 host pages
  CooperativeKVCache cache(c);
  cache.append(0, make_tensor(k.data(), DType::bf16, {L, kvh, d}), make_tensor(k.data(), DType::bf16, {L, kvh, d}));
  const TensorView Q = make_tensor(q.data(), DType::bf16, {1, 1, h, d});
  std::vector<std::uint16_t> out(static_cast<std::size_t>(h * d));
  const TensorView O = make_tensor(out.data(), DType::bf16, {1, 1, h, d});
  CooperativeOptions o;
  o.rates = rates(50e9, 80e9, 25e9);
  CooperativeStep step(Q, cache, o);
  const CooperativeSplit split = step.plan(0);
  ASSERT_GT(split.streamed_pages, 0);
  ASSERT_GT(split.cpu_pages, 0);
  step.run(Q, 0, O);  // the first run: timed, never refines
  const CooperativeStep::Times t1 = step.last_times();
  ASSERT_GT(t1.gpu_s, split.device_s);
  ASSERT_GT(t1.cpu_s, 0.0);
  EXPECT_GE(t1.step_s, t1.gpu_s + t1.cpu_s);  // the emulation runs the parts one after the other
  EXPECT_EQ(step.rates().pcie_h2d, 50e9);
  EXPECT_EQ(step.rates().source, "given");
  step.run(Q, 0, O);  // the second, with the same split: ~1 GB/s of "PCIe" against 50 GB/s
  const CooperativeStep::Times t = step.last_times();
  const double page_bytes = static_cast<double>(cache.page_bytes());
  const double streamed = static_cast<double>(split.streamed_pages) * page_bytes / (t.gpu_s - split.device_s);
  const double cpu = static_cast<double>(split.cpu_pages) * page_bytes / t.cpu_s;
  ASSERT_LT(streamed, 50e9 / 1.5);
  EXPECT_DOUBLE_EQ(step.rates().pcie_h2d, streamed);
  EXPECT_DOUBLE_EQ(step.rates().cpu_attention, cpu);
  EXPECT_GE(step.rates().host_read_during_dma, cpu);
  EXPECT_EQ(step.rates().gpu_hbm, 4e12);
  EXPECT_NE(step.rates().source.find("given; PCIe and CPU read replaced by run 2 of this step"), std::string::npos)
      << step.rates().source;
  // A third run within 1.5x of those rates leaves them (run-to-run noise); one further off
  // replaces them again.
  const CooperativeRates second = step.rates();
  const CooperativeSplit third = step.plan(0);
  step.run(Q, 0, O);
  if (third.streamed_pages > 0 && third.cpu_pages > 0) {
    const CooperativeStep::Times t3 = step.last_times();
    const double cpu3 = static_cast<double>(third.cpu_pages) * page_bytes / t3.cpu_s;
    const double streamed3 = static_cast<double>(third.streamed_pages) * page_bytes / (t3.gpu_s - third.device_s);
    const double off = std::max({cpu3 / second.cpu_attention, second.cpu_attention / cpu3, streamed3 / second.pcie_h2d,
                                 second.pcie_h2d / streamed3});
    if (off <= 1.5) {
      EXPECT_EQ(step.rates().cpu_attention, second.cpu_attention);
      EXPECT_EQ(step.rates().source, second.source);
    } else {
      EXPECT_DOUBLE_EQ(step.rates().cpu_attention, cpu3);
      EXPECT_NE(step.rates().source.find("by run 3 of this step"), std::string::npos) << step.rates().source;
    }
  }
  // Off, and with a forced split: the rates as given.
  for (const bool forced : {false, true}) {
    CooperativeOptions fixed = o;
    fixed.refine_rates = forced;
    if (forced) fixed.policy = SplitPolicy::stream_fraction;
    CooperativeStep other(Q, cache, fixed);
    for (int i = 0; i < 3; ++i) other.run(Q, 0, O);
    EXPECT_EQ(other.rates().pcie_h2d, 50e9);
    EXPECT_EQ(other.rates().cpu_attention, 25e9);
    EXPECT_EQ(other.rates().source, "given");
    EXPECT_GT(other.last_times().step_s, 0.0);
  }
}

}  // namespace
}  // namespace fastattn
