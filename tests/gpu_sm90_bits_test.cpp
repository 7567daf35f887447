// gpu_sm90_bits_test.cpp — settings of the sm90 forward (src/cuda/flash_fwd_sm90, issue 15)
// that change where or when a tile runs, or how O is stored, but not its arithmetic: their
// outputs must be bitwise equal. ctest label `gpu`; skipped unless the device's path is sm90.
//
//   * strided views (head-major storage, padded rows, 16-byte aligned as TMA needs) give the
//     same bits as the contiguous call, and the TMA store writes nothing outside the view;
//   * the persistent numbering's sections (l2, pair, wave);
//   * the epilogue's TMA store against the stores from registers;
//   * the grid, persistent and dynamic tile schedulers (FASTATTN_CUDA_SM90_SCHEDULER), padded and
//     varlen, each also against float64;
//   * the ordered GEMM issue (FASTATTN_CUDA_SM90_WG_ORDER), d = 64's narrow tile among them;
//   * two-CTA clusters sharing the K/V loads (FASTATTN_CUDA_SM90_CLUSTER; builds with
//     FASTATTN_SM90_KV_MULTICAST=1 only), also against float64.
#include <gtest/gtest.h>

#if defined(FASTATTN_TESTS_CUDA) && FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu_sm90_support.hpp"

namespace fastattn::testing {
namespace {

// Device buffers of one bf16 problem in two layouts: contiguous [b, s, h, d], and head-major
// storage [b, h, s, d + 8] with 64 elements between heads and 128 between batches (every row
// 16-byte aligned, as TMA needs). Same values; the outputs must be bitwise equal.
struct TwoLayouts {
  std::int64_t b, s, h, d;
  std::vector<void*> buffers;
  ~TwoLayouts() {
    for (void* p : buffers) cudaFree(p);
  }
  std::int64_t token_stride() const { return d + 8; }
  std::int64_t head_stride() const { return s * token_stride() + 64; }
  std::int64_t batch_stride() const { return h * head_stride() + 128; }
  void* alloc(std::size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0x7f, bytes), cudaSuccess);  // poison
    buffers.push_back(p);
    return p;
  }
  TensorView contiguous(const std::vector<std::uint16_t>& host) {
    void* p = alloc(host.size() * 2);
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    return make_tensor(p, DType::bf16, {b, s, h, d}, Device::cuda(0));
  }
  TensorView strided(const std::vector<std::uint16_t>& host) {
    std::vector<std::uint16_t> wide(static_cast<std::size_t>(b * batch_stride()), 0x7fc0);
    for (std::int64_t ib = 0; ib < b; ++ib)
      for (std::int64_t is = 0; is < s; ++is)
        for (std::int64_t ih = 0; ih < h; ++ih)
          std::memcpy(&wide[ib * batch_stride() + ih * head_stride() + is * token_stride()],
                      &host[((ib * s + is) * h + ih) * d], static_cast<std::size_t>(d) * 2);
    void* p = alloc(wide.size() * 2);
    EXPECT_EQ(cudaMemcpy(p, wide.data(), wide.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    return make_tensor(p, DType::bf16, {b, s, h, d}, {batch_stride(), token_stride(), head_stride(), 1},
                       Device::cuda(0));
  }
  TensorView strided_output() {
    void* p = alloc(static_cast<std::size_t>(b * batch_stride()) * 2);
    return make_tensor(p, DType::bf16, {b, s, h, d}, {batch_stride(), token_stride(), head_stride(), 1},
                       Device::cuda(0));
  }
  std::vector<std::uint16_t> gather(const TensorView& t) {
    std::vector<std::uint16_t> all(static_cast<std::size_t>(t.stride[0] * b)), out;
    EXPECT_EQ(cudaMemcpy(all.data(), t.data, all.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (std::int64_t ib = 0; ib < b; ++ib)
      for (std::int64_t is = 0; is < s; ++is)
        for (std::int64_t ih = 0; ih < h; ++ih)
          for (std::int64_t k = 0; k < d; ++k)
            out.push_back(all[ib * t.stride[0] + is * t.stride[1] + ih * t.stride[2] + k]);
    return out;
  }
};

// One bf16 call run under each of several environment settings: the output bits and the kernel
// choice of each, in order. Padded (b 2, s 1000, 24 query heads on 6 KV heads: 384 query tiles
// of 128 rows, so a persistent CTA runs several on the H200's 132 SMs), or with `varlen`
// packed sequences of lengths 1000, 0, 1 and 777 (cu_seqlens; tiles past a sequence's end, an
// empty sequence); causal or no mask.
using EnvSetting = std::vector<std::pair<const char*, std::string>>;
constexpr const char* kSchedulers[] = {"grid", "persistent", "dynamic"};
struct SettingBits {
  std::vector<std::vector<std::uint16_t>> out;  // per setting
  std::vector<KernelChoice> choices;
  SettingBits(int d, bool varlen, bool causal, const std::vector<EnvSetting>& settings) {
    const std::vector<std::int32_t> lens = {1000, 0, 1, 777};
    std::vector<std::int32_t> cu = {0};
    for (std::int32_t n : lens) cu.push_back(cu.back() + n);
    const std::int64_t b = varlen ? 1 : 2, s = varlen ? cu.back() : 1000, h = 24, hkv = 6;
    const auto q = random_bf16(static_cast<std::size_t>(b * s * h * d), 11);
    const auto kv = random_bf16(static_cast<std::size_t>(b * s * hkv * d), 12);
    std::vector<void*> buffers;
    auto upload = [&](const std::vector<std::uint16_t>& host) {
      void* p = nullptr;
      EXPECT_EQ(cudaMalloc(&p, host.size() * 2), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
      buffers.push_back(p);
      return p;
    };
    AttentionOptions o;
    o.backend = Backend::cuda;
    o.causal = causal;
    // Varlen: [total, h, d] views (batch 1 of the packed tokens) and cu_seqlens on the device.
    auto view = [&](void* data, std::int64_t heads) {
      return varlen ? make_tensor(data, DType::bf16, {s, heads, d}, Device::cuda(0))
                    : make_tensor(data, DType::bf16, {b, s, heads, d}, Device::cuda(0));
    };
    const TensorView qt = view(upload(q), h), kt = view(upload(kv), hkv), vt = view(upload(kv), hkv);
    if (varlen) {
      void* cu_dev = nullptr;
      EXPECT_EQ(cudaMalloc(&cu_dev, cu.size() * 4), cudaSuccess);
      EXPECT_EQ(cudaMemcpy(cu_dev, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
      buffers.push_back(cu_dev);
      o.cu_seqlens_q = make_tensor(cu_dev, DType::i32, {static_cast<std::int64_t>(cu.size())}, Device::cuda(0));
      o.cu_seqlens_k = o.cu_seqlens_q;
      o.max_seqlen_q = 1000;
      o.max_seqlen_k = 1000;
    }
    for (const EnvSetting& setting : settings) {
      std::vector<std::unique_ptr<ScopedEnv>> env;
      for (const auto& [name, value] : setting) env.push_back(std::make_unique<ScopedEnv>(name, value));
      std::vector<std::uint16_t> poison(q.size(), 0x7fc0);
      const TensorView ot = view(upload(poison), h);
      choices.push_back(forward(qt, kt, vt, ot, std::nullopt, o));
      EXPECT_EQ(choices.back().isa, "sm90") << choices.back().describe();
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<std::uint16_t> bits(q.size());
      EXPECT_EQ(cudaMemcpy(bits.data(), ot.data, bits.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      out.push_back(std::move(bits));
    }
    for (void* p : buffers) cudaFree(p);
  }
};

TEST_F(CudaSm90, StridedViewsGiveTheContiguousBits) {
  for (int d : dims_) {
    TwoLayouts t{2, 333, 3, d, {}};
    const std::size_t n = static_cast<std::size_t>(t.b * t.s * t.h * t.d);
    const auto q = random_bf16(n, 1), k = random_bf16(n, 2), v = random_bf16(n, 3);
    const TensorView qc = t.contiguous(q), kc = t.contiguous(k), vc = t.contiguous(v), oc = t.contiguous(q);
    const TensorView qs = t.strided(q), ks = t.strided(k), vs = t.strided(v), os = t.strided_output();
    AttentionOptions o;
    o.backend = Backend::cuda;
    o.causal = true;
    const KernelChoice a = forward(qc, kc, vc, oc, std::nullopt, o);
    const KernelChoice b = forward(qs, ks, vs, os, std::nullopt, o);
    ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(a.isa, "sm90") << a.describe();
    EXPECT_EQ(b.isa, "sm90") << b.describe();
    const std::vector<std::uint16_t> out_c = t.gather(oc), out_s = t.gather(os);
    ASSERT_EQ(out_c.size(), out_s.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < out_c.size(); ++i) differ += out_c[i] != out_s[i];
    EXPECT_EQ(differ, 0u) << "d=" << d;
    // The strided out's gaps (row padding, head and batch slack) keep their poison: the TMA
    // store (epilogue.cuh) writes only the view's elements.
    std::vector<std::uint16_t> all(static_cast<std::size_t>(t.b * t.batch_stride()));
    ASSERT_CUDA(cudaMemcpy(all.data(), os.data, all.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<bool> in_view(all.size(), false);
    for (std::int64_t ib = 0; ib < t.b; ++ib)
      for (std::int64_t is = 0; is < t.s; ++is)
        for (std::int64_t ih = 0; ih < t.h; ++ih)
          for (std::int64_t e = 0; e < t.d; ++e)
            in_view[static_cast<std::size_t>(ib * t.batch_stride() + ih * t.head_stride() + is * t.token_stride() + e)] = true;
    std::size_t written_outside = 0;
    for (std::size_t i = 0; i < all.size(); ++i) written_outside += !in_view[i] && all[i] != 0x7f7f;
    EXPECT_EQ(written_outside, 0u) << "d=" << d;
    EXPECT_EQ(b.reason.find("TMA store") != std::string::npos, d != 256) << b.describe();
  }
}

// The persistent numbering's sections (plan.hpp: Sm90Sections: l2, pair, wave) change which CTA
// runs a tile and when, not the tile's arithmetic: the same bits, padded and varlen, causal and
// not.
TEST_F(CudaSm90, SectionsGiveTheSameBits) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    const std::vector<EnvSetting> settings = {
        {{"FASTATTN_CUDA_SM90_SCHEDULER", "persistent"}, {"FASTATTN_CUDA_SM90_SECTIONS", "l2"}},
        {{"FASTATTN_CUDA_SM90_SCHEDULER", "persistent"}, {"FASTATTN_CUDA_SM90_SECTIONS", "pair"}},
        {{"FASTATTN_CUDA_SM90_SCHEDULER", "persistent"}, {"FASTATTN_CUDA_SM90_SECTIONS", "wave"}}};
    for (const bool varlen : {false, true}) {
      for (const bool causal : {false, true}) {
        const SettingBits bits(d, varlen, causal, settings);
        ASSERT_EQ(bits.out.size(), 3u);
        EXPECT_NE(bits.choices[1].reason.find("query blocks together"), std::string::npos) << bits.choices[1].describe();
        EXPECT_NE(bits.choices[2].reason.find("sections of one wave"), std::string::npos) << bits.choices[2].describe();
        EXPECT_EQ(bits.out[0], bits.out[1]) << "d=" << d << (varlen ? " varlen" : "") << (causal ? " causal" : "");
        EXPECT_EQ(bits.out[0], bits.out[2]) << "wave, d=" << d << (varlen ? " varlen" : "") << (causal ? " causal" : "");
      }
    }
  }
}

// The epilogue's TMA store of O (epilogue.cuh) writes what the stores from the registers write
// (FASTATTN_CUDA_SM90_TMA_STORE=0): the same bits, causal and not, under both schedulers, on
// 1000 rows (a partial last query tile, whose padding rows TMA does not store); varlen calls store
// from the registers either way.
TEST_F(CudaSm90, TmaStoreGivesTheSameBits) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    for (const char* scheduler : {"grid", "persistent"}) {
      const std::vector<EnvSetting> settings = {
          {{"FASTATTN_CUDA_SM90_SCHEDULER", scheduler}, {"FASTATTN_CUDA_SM90_TMA_STORE", "0"}},
          {{"FASTATTN_CUDA_SM90_SCHEDULER", scheduler}, {"FASTATTN_CUDA_SM90_TMA_STORE", "1"}}};
      for (const bool varlen : {false, true}) {
        for (const bool causal : {false, true}) {
          const SettingBits bits(d, varlen, causal, settings);
          ASSERT_EQ(bits.out.size(), 2u);
          EXPECT_EQ(bits.choices[0].reason.find("TMA store"), std::string::npos) << bits.choices[0].describe();
          EXPECT_EQ(bits.choices[1].reason.find("TMA store") != std::string::npos, d != 256 && !varlen)
              << bits.choices[1].describe();
          EXPECT_EQ(bits.out[0], bits.out[1]) << "d=" << d << " " << scheduler << (varlen ? " varlen" : "")
                                              << (causal ? " causal" : "");
        }
      }
    }
  }
}

// The three tile schedulers (plan.hpp: Sm90Scheduler) run the same per-tile arithmetic: the
// same bits, padded and varlen, and each right against float64 (causal with rows that see no
// key, a window, GQA 7:1, a tile count that is not a multiple of the SM count, varlen with
// empty sequences). dynamic runs several calls in a row, whose scratch the pool hands back
// with the last count in it: the tile counter must be zeroed per call.
TEST_F(CudaSm90, SchedulersGiveTheSameBits) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  for (int d : dims_) {
    const std::string hd = " d=" + std::to_string(d);
    for (const char* scheduler : kSchedulers) {
      const ScopedEnv env("FASTATTN_CUDA_SM90_SCHEDULER", std::string(scheduler));
      expect_sm90("b=3 sq=1000 sk=1000 h=7 hkv=1" + hd + " dtype=bf16 mask=causal");
      expect_sm90("b=2 sq=300 sk=65 h=2 hkv=2" + hd + " dtype=f16 mask=causal align=bottom_right");
      expect_sm90("b=1 sq=700 sk=900 h=3 hkv=3" + hd + " dtype=bf16 mask=window wl=100 wr=30");
      expect_varlen("lens_q=1,700,0,130,64 lens_k=900,700,3,1,640 h=4 hkv=2" + hd + " dtype=f16 mask=causal");
    }
    std::vector<EnvSetting> settings;
    for (const char* scheduler : kSchedulers) settings.push_back({{"FASTATTN_CUDA_SM90_SCHEDULER", scheduler}});
    for (const bool varlen : {false, true}) {
      const SettingBits bits(d, varlen, /*causal=*/true, settings);
      ASSERT_EQ(bits.out.size(), 3u);
      for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_NE(bits.choices[i].reason.find(i == 0 ? "one CTA per tile" : "persistent CTAs"), std::string::npos)
            << bits.choices[i].describe();
      }
      EXPECT_EQ(bits.out[0], bits.out[1]) << "grid vs persistent, d=" << d << (varlen ? " varlen" : "");
      EXPECT_EQ(bits.out[0], bits.out[2]) << "grid vs dynamic, d=" << d << (varlen ? " varlen" : "");
    }
  }
}

// The ordered GEMM issue of the two consumer warpgroups (plan.hpp: sm90_wg_order) changes when a
// warpgroup issues, not what it computes: the same bits with and without it, under both
// schedulers, padded and varlen, causal and not (the overlap kernels: d 96, 128 and 256, and
// d 64's narrow tile, padded causal).
TEST_F(CudaSm90, OrderedIssueGivesTheSameBits) {
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  // The call without and with the ordered issue, under `scheduler`, with var=value besides.
  auto without_and_with_order = [](const char* scheduler, const char* var, const char* value) {
    return std::vector<EnvSetting>{
        {{"FASTATTN_CUDA_SM90_SCHEDULER", scheduler}, {"FASTATTN_CUDA_SM90_WG_ORDER", "0"}, {var, value}},
        {{"FASTATTN_CUDA_SM90_SCHEDULER", scheduler}, {"FASTATTN_CUDA_SM90_WG_ORDER", "1"}, {var, value}}};
  };
  auto expect_same_bits = [](const SettingBits& bits, const std::string& what) {
    ASSERT_EQ(bits.out.size(), 2u);
    EXPECT_EQ(bits.choices[0].reason.find("alternating"), std::string::npos) << bits.choices[0].describe();
    EXPECT_NE(bits.choices[1].reason.find("alternating their GEMM issue"), std::string::npos)
        << bits.choices[1].describe();
    EXPECT_EQ(bits.out[0], bits.out[1]) << what;
  };
  for (int d : dims_) {
    if (!cuda::sm90_overlap_fits(d)) continue;
    for (const char* scheduler : {"grid", "persistent"}) {
      const std::vector<EnvSetting> settings = without_and_with_order(scheduler, "FASTATTN_CUDA_SM90_OVERLAP", "1");
      for (const bool varlen : {false, true}) {
        for (const bool causal : {false, true}) {
          expect_same_bits(SettingBits(d, varlen, causal, settings), "d=" + std::to_string(d) + " " + scheduler +
                                                                         (varlen ? " varlen" : "") +
                                                                         (causal ? " causal" : ""));
        }
      }
    }
  }
  // d = 64's narrow tile (padded causal calls; FASTATTN_CUDA_SM90_D64_TILE=128) has an ordered
  // kernel too (its two consumer warpgroups).
  if (std::find(dims_.begin(), dims_.end(), 64) == dims_.end()) return;
  for (const char* scheduler : {"grid", "persistent"}) {
    const SettingBits bits(64, false, true, without_and_with_order(scheduler, "FASTATTN_CUDA_SM90_D64_TILE", "128"));
    ASSERT_EQ(bits.out.size(), 2u);
    EXPECT_NE(bits.choices[1].reason.find("narrow tile"), std::string::npos) << bits.choices[1].describe();
    expect_same_bits(bits, std::string("d=64 narrow tile ") + scheduler);
  }
}

// Two-CTA clusters sharing the K/V loads (plan.hpp: sm90_cluster) change which CTA loads which
// half of a K/V tile, not the arithmetic: the same bits as the kernel without them (padded
// without a mask, the calls they serve; causal and varlen calls must not take them), and right
// against float64: a partial key tile, a partial last query block, one key, GQA, more tiles than
// CTAs (several per persistent CTA); an odd number of query blocks runs unclustered.
TEST_F(CudaSm90, ClustersGiveTheSameBits) {
  if (!cuda::sm90_cluster_compiled(128) || std::find(dims_.begin(), dims_.end(), 128) == dims_.end()) {
    GTEST_SKIP() << "no two-CTA cluster kernel in this build (FASTATTN_SM90_KV_MULTICAST=1, d = 128)";
  }
  const ScopedEnv one_split("FASTATTN_CUDA_NUM_SPLITS", std::string("1"));
  const std::vector<EnvSetting> settings = {{{"FASTATTN_CUDA_SM90_CLUSTER", "0"}},
                                            {{"FASTATTN_CUDA_SM90_CLUSTER", "1"}}};
  for (const bool varlen : {false, true}) {
    for (const bool causal : {false, true}) {
      const SettingBits bits(128, varlen, causal, settings);
      ASSERT_EQ(bits.out.size(), 2u);
      const std::string what = std::string(varlen ? "varlen" : "padded") + (causal ? " causal" : "");
      EXPECT_EQ(bits.choices[0].reason.find("two-CTA clusters"), std::string::npos) << bits.choices[0].describe();
      EXPECT_EQ(bits.choices[1].reason.find("two-CTA clusters") != std::string::npos, !varlen && !causal)
          << what << ": " << bits.choices[1].describe();
      EXPECT_EQ(bits.out[0], bits.out[1]) << what;
    }
  }
  auto expect_clustered = [](const std::string& text, bool clustered) {
    const harness::CheckReport r = harness::check_case(harness::parse_case(text), Backend::cuda, forward_only());
    EXPECT_TRUE(r.pass) << text << "\n" << r.to_string();
    EXPECT_EQ(r.forward_choice.reason.find("two-CTA clusters") != std::string::npos, clustered)
        << text << "\n" << r.forward_choice.describe();
  };
  expect_clustered("b=2 sq=256 sk=77 h=4 hkv=2 d=128 dtype=bf16", true);
  expect_clustered("b=2 sq=1000 sk=1023 h=5 hkv=5 d=128 dtype=f16", true);
  expect_clustered("b=1 sq=4096 sk=1 h=40 hkv=8 d=128 dtype=bf16", true);
  expect_clustered("b=2 sq=300 sk=500 h=2 hkv=1 d=128 dtype=bf16", false);
}

}  // namespace
}  // namespace fastattn::testing
#endif
