// gpu_kv_cache_kernel_test.cpp — the CUDA KV-cache kernels at the internal level
// (src/cuda/inference/kv_cache.hpp: kv_cache_plan / kv_cache_forward), label `gpu`.
//
// Each case builds a KVCacheProblem by hand from device buffers: a contiguous or paged cache
// (pages shuffled through the block table, spare pages), ragged cache lengths, an optional
// append. Cache slots past each sequence's length and pages no sequence uses hold NaN, so a
// read outside the visible keys shows up; out and lse start poisoned. After the run the cache is
// compared bitwise with the host's append, the visible keys are gathered on the host and the
// output and lse judged against the float64 oracle (src/reference) by the harness's rule
// (harness/judge.hpp). A CUDA-graph test replays a captured call with seqlens and the block
// table changed on the device and expects bitwise equality with eager calls. The plan's
// host-side heuristics are checked in kv_cache_heuristics_test.cpp (CPU suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/random.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing {
namespace {

// ---- device cases -----------------------------------------------------------------------------

class CudaKVCacheKernel : public GpuTest {};

#if FASTATTN_TESTS_CUDA
void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorCode::device_error, std::string(what) + ": " + cudaGetErrorString(status));
}

// A device buffer with the bytes of a host vector.
struct DeviceBuffer {
  void* data = nullptr;
  std::size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) : bytes(n) {
    if (n > 0) cuda_ok(cudaMalloc(&data, n), "cudaMalloc");
  }
  template <class T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    upload(host);
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  void upload(const std::vector<T>& host) {
    if (bytes > 0) cuda_ok(cudaMemcpy(data, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> host(bytes / sizeof(T));
    if (bytes > 0) cuda_ok(cudaMemcpy(host.data(), data, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
  }
};

// One KV-cache call. page_size 0: contiguous cache of `capacity` tokens per sequence; else
// pages of page_size tokens, ceil(capacity / page_size) per sequence, 3 spare pages.
struct KVCase {
  std::int64_t seqlen_q = 1, heads = 8, kv_heads = 2, head_dim = 128;
  DType dtype = DType::bf16;
  std::vector<std::int32_t> held;  // tokens already cached, per sequence (may be out of range)
  std::int64_t seqlen_new = 0;
  std::int64_t page_size = 0;
  std::int64_t capacity = 64;
  bool causal = true;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  bool bad_pages = false;  // block-table entries outside [0, num_pages) (the append skips them)
  bool nan_outside = true; // NaN in cache slots the attention must not read
  std::uint64_t seed = 1;

  std::int64_t batch() const { return static_cast<std::int64_t>(held.size()); }
  std::string describe() const {
    std::ostringstream s;
    s << "b=" << batch() << " sq=" << seqlen_q << " h=" << heads << " hkv=" << kv_heads << " d=" << head_dim << " "
      << to_string(dtype) << " held=";
    for (std::size_t i = 0; i < held.size(); ++i) s << (i ? "," : "") << held[i];
    s << " new=" << seqlen_new << " page_size=" << page_size << " capacity=" << capacity
      << (causal ? " causal" : "") << " wl=" << window_left << " wr=" << window_right << " softcap=" << softcap
      << (bad_pages ? " bad_pages" : "") << " seed=" << seed;
    return s.str();
  }
};

// Host copies of a case's cache, in its own layout, with the geometry to address it.
struct HostCache {
  std::int64_t page_size = 0, pages_per_seq = 0, num_pages = 0, capacity = 0;
  std::int64_t kv_heads = 0, head_dim = 0;
  std::vector<std::int32_t> block_table;  // empty: contiguous
  std::vector<std::uint16_t> k, v;        // [num_pages, page_size, kv_heads, head_dim] bits

  std::int64_t page_stride() const { return page_size * kv_heads * head_dim; }
  std::int64_t clamp_page(std::int64_t page) const { return std::min(std::max<std::int64_t>(page, 0), num_pages - 1); }
  // Element offset of (sequence b, token t, KV head h), as the kernels resolve it.
  std::int64_t offset(std::int64_t b, std::int64_t t, std::int64_t h) const {
    const std::int64_t page =
        block_table.empty() ? b : clamp_page(block_table[static_cast<std::size_t>(b * pages_per_seq + t / page_size)]);
    const std::int64_t row = block_table.empty() ? t : t % page_size;
    return page * page_stride() + (row * kv_heads + h) * head_dim;
  }
};

// Keys the attention of sequence b sees, as the kernels and the CPU count them (kv_cache_pages.cuh,
// src/cpu/decode_keys.hpp): seqlens[b] + seqlen_new clamped to [0, capacity].
std::int64_t attended_length(const KVCase& c, std::int64_t b, std::int64_t capacity) {
  return std::clamp<std::int64_t>(std::int64_t{c.held[static_cast<std::size_t>(b)]} + c.seqlen_new, 0, capacity);
}

std::vector<std::uint16_t> random_bits(harness::Random& rng, DType dtype, std::int64_t n, double scale) {
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) store_element(bits.data(), dtype, i, scale * rng.normal());
  return bits;
}

// Everything one run needs on the device, and what it produced.
struct KVRun {
  HostCache cache;            // before the run
  HostCache expected;         // after the host's append
  std::vector<std::uint16_t> q, k_new, v_new;
  std::vector<std::int32_t> seqlens;
};

KVRun make_inputs(const KVCase& c) {
  harness::Random rng(c.seed * 7919 + 17);
  KVRun r;
  HostCache& h = r.cache;
  const std::int64_t b = c.batch(), d = c.head_dim;
  h.kv_heads = c.kv_heads;
  h.head_dim = d;
  if (c.page_size == 0) {
    h.page_size = c.capacity;
    h.pages_per_seq = 1;
    h.num_pages = b;
  } else {
    h.page_size = c.page_size;
    h.pages_per_seq = (c.capacity + c.page_size - 1) / c.page_size;
    h.num_pages = b * h.pages_per_seq + 3;
    std::vector<std::int32_t> pages(static_cast<std::size_t>(h.num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    for (std::size_t i = pages.size() - 1; i > 0; --i) std::swap(pages[i], pages[static_cast<std::size_t>(rng.range(0, static_cast<std::int64_t>(i)))]);
    h.block_table.assign(pages.begin(), pages.begin() + b * h.pages_per_seq);
    if (c.bad_pages) {
      for (std::size_t i = 0; i < h.block_table.size(); i += 3) {
        h.block_table[i] = i % 2 == 0 ? -1 - static_cast<std::int32_t>(i) : static_cast<std::int32_t>(h.num_pages + i);
      }
    }
  }
  h.capacity = h.pages_per_seq * h.page_size;
  const std::int64_t elems = h.num_pages * h.page_stride();
  h.k = random_bits(rng, c.dtype, elems, 1.0);
  h.v = random_bits(rng, c.dtype, elems, 1.0);
  // NaN everywhere the attention must not read: past each sequence's visible keys (the append
  // overwrites its own slots below), and pages no sequence uses.
  const std::uint16_t nan = static_cast<std::uint16_t>(harness::poison_bits(c.dtype));
  std::vector<char> visible(static_cast<std::size_t>(elems), 0);
  for (std::int64_t s = 0; s < b; ++s)
    for (std::int64_t t = 0; t < attended_length(c, s, h.capacity); ++t)
      for (std::int64_t kvh = 0; kvh < c.kv_heads; ++kvh)
        std::fill_n(visible.begin() + h.offset(s, t, kvh), d, 1);
  for (std::int64_t i = 0; i < elems && c.nan_outside; ++i)
    if (!visible[static_cast<std::size_t>(i)]) h.k[static_cast<std::size_t>(i)] = h.v[static_cast<std::size_t>(i)] = nan;

  r.q = random_bits(rng, c.dtype, b * c.seqlen_q * c.heads * d, 1.0);
  r.k_new = random_bits(rng, c.dtype, b * c.seqlen_new * c.kv_heads * d, 1.0);
  r.v_new = random_bits(rng, c.dtype, b * c.seqlen_new * c.kv_heads * d, 1.0);
  r.seqlens = c.held;
  r.expected = h;
  for (std::int64_t s = 0; s < b; ++s) {
    // The append writes token t at seqlens[b] + t, skipping positions outside [0, capacity) and
    // block-table entries outside [0, num_pages), as the CPU append does.
    for (std::int64_t t = 0; t < c.seqlen_new; ++t) {
      const std::int64_t pos = std::int64_t{c.held[static_cast<std::size_t>(s)]} + t;
      if (pos < 0 || pos >= h.capacity) continue;
      if (!h.block_table.empty()) {
        const std::int64_t page = h.block_table[static_cast<std::size_t>(s * h.pages_per_seq + pos / h.page_size)];
        if (page < 0 || page >= h.num_pages) continue;
      }
      for (std::int64_t kvh = 0; kvh < c.kv_heads; ++kvh) {
        const std::int64_t src = ((s * c.seqlen_new + t) * c.kv_heads + kvh) * d;
        std::copy_n(r.k_new.begin() + src, d, r.expected.k.begin() + h.offset(s, pos, kvh));
        std::copy_n(r.v_new.begin() + src, d, r.expected.v.begin() + h.offset(s, pos, kvh));
      }
    }
  }
  return r;
}

// The device buffers of a run and the KVCacheProblem over them.
struct DeviceCall {
  DeviceBuffer q, k, v, k_new, v_new, seqlens, block_table;
  harness::HostTensor out, lse;  // host images (poison, guards) of the outputs
  DeviceBuffer out_dev, lse_dev;
  KVCacheProblem problem;

  DeviceCall(const KVCase& c, const KVRun& r, cudaStream_t stream)
      : q(r.q), k(r.cache.k), v(r.cache.v), k_new(r.k_new), v_new(r.v_new), seqlens(r.seqlens),
        block_table(r.cache.block_table),
        out(c.dtype, {c.batch(), c.seqlen_q, c.heads, c.head_dim}),
        lse(DType::f32, {c.batch(), c.heads, c.seqlen_q}),
        out_dev(out.storage_bytes()), lse_dev(lse.storage_bytes()) {
    const std::int64_t d = c.head_dim;
    AttentionProblem& a = problem.attn;
    a.dtype = c.dtype;
    a.device = Device::cuda(0);
    a.batch = c.batch();
    a.num_heads = c.heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = d;
    a.seqlen_q = c.seqlen_q;
    a.seqlen_k = r.cache.capacity;
    a.total_q = c.batch() * c.seqlen_q;
    a.total_k = c.batch() * r.cache.capacity;
    a.q = {q.data, {c.seqlen_q * c.heads * d, c.heads * d, d}};
    a.out = {device_view(out, out_dev), {c.seqlen_q * c.heads * d, c.heads * d, d}};
    a.k = {k.data, {0, c.kv_heads * d, d}};
    a.v = {v.data, {0, c.kv_heads * d, d}};
    a.lse = static_cast<float*>(device_view(lse, lse_dev));
    a.lse_batch_stride = c.heads * c.seqlen_q;
    a.lse_head_stride = c.seqlen_q;
    a.lse_token_stride = 1;
    a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
    a.softcap = c.softcap;
    a.window_left = c.window_left;
    a.window_right = c.causal ? 0 : c.window_right;
    a.alignment = MaskAlignment::bottom_right;
    a.cuda_stream = stream;
    problem.k_page_stride = r.cache.page_stride();
    problem.v_page_stride = r.cache.page_stride();
    problem.page_size = r.cache.page_size;
    problem.num_pages = r.cache.num_pages;
    problem.block_table = r.cache.block_table.empty() ? nullptr : static_cast<const std::int32_t*>(block_table.data);
    problem.block_table_stride = r.cache.pages_per_seq;
    problem.max_pages_per_seq = r.cache.pages_per_seq;
    problem.seqlens = static_cast<const std::int32_t*>(seqlens.data);
    problem.seqlen_new = c.seqlen_new;
    if (c.seqlen_new > 0) {
      const TokenStrides s{c.seqlen_new * c.kv_heads * d, c.kv_heads * d, d};
      problem.k_new = {k_new.data, s};
      problem.v_new = {v_new.data, s};
    }
    poison();
  }

  // The tensor's whole allocation (guards included) lives at the same offsets on the device.
  static void* device_view(harness::HostTensor& t, DeviceBuffer& buf) {
    return static_cast<std::uint8_t*>(buf.data) + (static_cast<const std::uint8_t*>(t.view().data) - t.storage());
  }
  void poison() {
    out.fill_view_bits(harness::poison_bits(out.dtype()));
    lse.fill_view_bits(harness::poison_bits(DType::f32));
    cuda_ok(cudaMemcpy(out_dev.data, out.storage(), out.storage_bytes(), cudaMemcpyHostToDevice), "poison out");
    cuda_ok(cudaMemcpy(lse_dev.data, lse.storage(), lse.storage_bytes(), cudaMemcpyHostToDevice), "poison lse");
  }
  void fetch_outputs() {
    cuda_ok(cudaMemcpy(out.storage(), out_dev.data, out.storage_bytes(), cudaMemcpyDeviceToHost), "out to host");
    cuda_ok(cudaMemcpy(lse.storage(), lse_dev.data, lse.storage_bytes(), cudaMemcpyDeviceToHost), "lse to host");
  }
};

// The float64 oracle and the naive baseline over the visible keys, gathered from the expected
// cache (the append applied), as a varlen problem on the host.
struct HostReference {
  std::vector<std::uint16_t> k, v;  // [total_k, kv_heads, d]
  std::vector<std::int32_t> cu_q, cu_k;
  AttentionProblem p;
};

HostReference host_problem(const KVCase& c, const KVRun& r) {
  HostReference h;
  const std::int64_t b = c.batch(), d = c.head_dim, cap = r.expected.capacity;
  h.cu_q.push_back(0);
  h.cu_k.push_back(0);
  std::int64_t max_k = 0;
  for (std::int64_t s = 0; s < b; ++s) {
    const std::int64_t len = attended_length(c, s, cap);
    max_k = std::max(max_k, len);
    for (std::int64_t t = 0; t < len; ++t)
      for (std::int64_t kvh = 0; kvh < c.kv_heads; ++kvh) {
        const std::int64_t at = r.expected.offset(s, t, kvh);
        h.k.insert(h.k.end(), r.expected.k.begin() + at, r.expected.k.begin() + at + d);
        h.v.insert(h.v.end(), r.expected.v.begin() + at, r.expected.v.begin() + at + d);
      }
    h.cu_q.push_back(static_cast<std::int32_t>((s + 1) * c.seqlen_q));
    h.cu_k.push_back(h.cu_k.back() + static_cast<std::int32_t>(len));
  }
  AttentionProblem& p = h.p;
  p.dtype = c.dtype;
  p.device = Device::cpu();
  p.batch = b;
  p.num_heads = c.heads;
  p.num_kv_heads = c.kv_heads;
  p.head_dim = d;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = max_k;
  p.total_q = b * c.seqlen_q;
  p.total_k = h.cu_k.back();
  p.cu_seqlens_q = h.cu_q.data();
  p.cu_seqlens_k = h.cu_k.data();
  p.q = {const_cast<std::uint16_t*>(r.q.data()), {0, c.heads * d, d}};
  p.k = {h.k.data(), {0, c.kv_heads * d, d}};
  p.v = {h.v.data(), {0, c.kv_heads * d, d}};
  p.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  p.softcap = c.softcap;
  p.window_left = c.window_left;
  p.window_right = c.causal ? 0 : c.window_right;
  p.alignment = MaskAlignment::bottom_right;
  return h;
}

// Runs the case (plan + forward on a non-default stream) and judges it; returns the failures.
// stages > 0: that K/V ring instead of the plan's (kv_cache_heuristics.hpp: the deep ring).
// combine: how the splits are merged, when not the plan's (kv_cache_heuristics.hpp: KVCombine).
// out_bits: when given, receives out's bits.
std::string run_and_judge(const KVCase& c, int stages = 0, std::optional<cuda::KVCombine> combine = std::nullopt,
                          std::vector<std::uint16_t>* out_bits = nullptr) {
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::string failures;
  try {
    const KVRun r = make_inputs(c);
    DeviceCall call(c, r, stream);
    cuda::KVCacheLaunch launch = cuda::kv_cache_plan(call.problem, r.cache.capacity);
    if (stages > 0 && stages != launch.stages) {
      launch.stages = stages;
      cuda::kv_cache_select_kernels(call.problem, launch);  // that ring's kernel
    }
    if (combine && launch.num_splits > 1) {
      launch.combine = *combine;
      if (*combine == cuda::KVCombine::separate) launch.counter_bytes = 0;
    }
    DeviceBuffer scratch(launch.scratch_bytes);
    cuda_ok(cudaMemset(scratch.data, 0x7f, launch.scratch_bytes), "poison the scratch");  // counters too
    cuda::kv_cache_forward(call.problem, launch, scratch.data);
    cuda_ok(cudaStreamSynchronize(stream), "kv_cache_forward");
    call.fetch_outputs();
    if (out_bits != nullptr) {
      out_bits->clear();
      for (std::int64_t i = 0; i < call.out.numel(); ++i) out_bits->push_back(static_cast<std::uint16_t>(call.out.bits(i)));
    }
    if (call.k.download<std::uint16_t>() != r.expected.k) failures += " k cache differs from the host's append;";
    if (call.v.download<std::uint16_t>() != r.expected.v) failures += " v cache differs from the host's append;";

    HostReference h = host_problem(c, r);
    const reference::ForwardResult ref = reference::forward_f64(h.p);
    const harness::NaiveForward naive = harness::naive_forward(h.p);
    std::vector<double> got_lse(ref.lse.size());
    for (std::int64_t s = 0; s < c.batch(); ++s)
      for (std::int64_t head = 0; head < c.heads; ++head)
        for (std::int64_t t = 0; t < c.seqlen_q; ++t)
          got_lse[static_cast<std::size_t>(head * h.p.total_q + s * c.seqlen_q + t)] =
              call.lse.get((s * c.heads + head) * c.seqlen_q + t);
    const harness::TensorCheck out = harness::judge_tensor("out", call.out, call.out.values(), ref.out, naive.out,
                                                           naive.out_terms, c.dtype, c.head_dim, false);
    const harness::TensorCheck lse = harness::judge_tensor("lse", call.lse, got_lse, ref.lse, naive.lse,
                                                           naive.lse_terms, c.dtype, c.head_dim, true);
    for (const harness::TensorCheck* t : {&out, &lse})
      if (!t->pass) failures += " " + t->to_string() + ";";
    if (!failures.empty()) failures += " kernel " + launch.kernel + " (" + launch.reason + ")";
  } catch (const Error& e) {
    failures += std::string(" threw: ") + e.what();
  }
  cudaStreamDestroy(stream);
  return failures;
}

std::vector<KVCase> chosen_cases(std::int64_t d) {
  std::vector<KVCase> cases;
  auto add = [&](KVCase c) {
    c.head_dim = d;
    c.seed = cases.size() + 1;
    cases.push_back(c);
  };
  // Cache lengths 0, 1 and 17, ragged, every page size, decode with and without an append.
  for (std::int64_t page : {0, 1, 3, 16, 64}) {
    KVCase c;
    c.held = std::vector<std::int32_t>{0, 1, 17, 200};
    c.capacity = 300;
    c.page_size = page;
    add(c);
    c.seqlen_new = 1;
    c.held = std::vector<std::int32_t>{0, 1, 17, 299};  // the last append lands on the last slot
    c.dtype = DType::f16;
    add(c);
  }
  {  // GQA 7:1, speculative decoding (4 and 16 tokens appended and attended), page size 3.
    KVCase c;
    c.heads = 7;
    c.kv_heads = 1;
    c.held = std::vector<std::int32_t>{5, 0, 40};
    c.capacity = 90;
    c.page_size = 3;
    c.seqlen_q = 4;
    c.seqlen_new = 4;
    add(c);
    c.seqlen_q = 16;
    c.seqlen_new = 16;
    c.page_size = 16;
    add(c);
    c.seqlen_q = 1;
    c.seqlen_new = 0;
    c.held = std::vector<std::int32_t>{89, 17, 1};
    add(c);
  }
  {  // Window, soft-cap, MHA, a query longer than a short cache (rows before the first key).
    KVCase c;
    c.heads = 4;
    c.kv_heads = 4;
    c.held = std::vector<std::int32_t>{300, 17, 1000};
    c.capacity = 1024;
    c.page_size = 16;
    c.window_left = 37;
    c.seqlen_q = 4;
    add(c);
    c.softcap = 30.0f;
    c.window_left = -1;
    c.page_size = 64;
    add(c);
    c.held = std::vector<std::int32_t>{1, 2, 0};
    c.seqlen_q = 16;
    c.softcap = 0.0f;
    add(c);
  }
  {  // Not causal, a two-sided window over a paged cache of page size 1.
    KVCase c;
    c.causal = false;
    c.window_left = 20;
    c.window_right = 5;
    c.seqlen_q = 9;
    c.heads = 6;
    c.kv_heads = 2;
    c.held = std::vector<std::int32_t>{100, 31};
    c.capacity = 128;
    c.page_size = 1;
    add(c);
  }
  {  // Long caches: the heuristic splits the keys (combine kernel), paged whole-page tiles.
    KVCase c;
    c.heads = 32;
    c.kv_heads = 8;
    c.held = std::vector<std::int32_t>{5000, 3000};
    c.capacity = 5120;
    c.page_size = 256;
    add(c);
    c.page_size = 0;
    c.held = std::vector<std::int32_t>{5120, 1};
    add(c);
  }
  {  // Chunked prefill: 40 and 200 query tokens (128-row tiles), paged.
    KVCase c;
    c.heads = 4;
    c.kv_heads = 2;
    c.seqlen_q = 40;
    c.seqlen_new = 40;
    c.held = std::vector<std::int32_t>{0, 77, 13};
    c.capacity = 200;
    c.page_size = 3;
    add(c);
    c.seqlen_q = 200;
    c.seqlen_new = 0;
    c.held = std::vector<std::int32_t>{200, 150, 199};
    c.page_size = 64;
    add(c);
  }
  {  // Out-of-range seqlens and block-table values: nothing outside the cache touched, and no
     // append into a page of another sequence (bad entries are skipped, as on the CPU).
    KVCase c;
    c.held = std::vector<std::int32_t>{-5, 1000, 7};
    c.capacity = 100;
    c.page_size = 16;
    c.seqlen_new = 3;
    add(c);
    c.held = std::vector<std::int32_t>{-2, 1000, 7};  // sequence 0: tokens at -2, -1 skipped, 1 key
    add(c);
    c.bad_pages = true;
    add(c);
    c.seqlen_new = 0;
    add(c);
  }
  return cases;
}
#endif

TEST_F(CudaKVCacheKernel, ChosenCasesMatchFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int d : build_info().cuda_head_dims) {
    for (const KVCase& c : chosen_cases(d)) {
      const std::string failures = run_and_judge(c);
      EXPECT_TRUE(failures.empty()) << c.describe() << ":" << failures;
    }
  }
#endif
}

// The reduced 2-stage K/V ring (kv_reduced_stages: devices of 101,376 bytes per block, sm86 / sm89
// / sm120) on every chosen case whose tile has it.
TEST_F(CudaKVCacheKernel, ReducedRingMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int d : build_info().cuda_head_dims) {
    if (cuda::kv_reduced_stages(d) == 0) continue;
    for (const KVCase& c : chosen_cases(d)) {
      const std::string failures = run_and_judge(c, cuda::kv_reduced_stages(d));
      EXPECT_TRUE(failures.empty()) << c.describe() << " reduced ring:" << failures;
    }
  }
#endif
}

// The deep K/V ring (kv_deep_stages) of the 16-row tile on the chosen cases that use that tile.
TEST_F(CudaKVCacheKernel, DeepRingMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int d : build_info().cuda_head_dims) {
    if (cuda::kv_deep_stages(d) == 0) continue;
    for (const KVCase& c : chosen_cases(d)) {
      if (cuda::kv_row_tile(c.heads / c.kv_heads * c.seqlen_q, d).rows != 16) continue;
      const std::string failures = run_and_judge(c, cuda::kv_deep_stages(d));
      EXPECT_TRUE(failures.empty()) << c.describe() << " deep ring:" << failures;
    }
  }
#endif
}

// Forced split counts, more splits than key tiles included (empty splits write -inf partials).
TEST_F(CudaKVCacheKernel, ForcedSplitsMatchFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int splits : {2, 5, 128}) {
    const ScopedEnv env("FASTATTN_CUDA_NUM_SPLITS", std::to_string(splits));
    for (int d : build_info().cuda_head_dims) {
      KVCase c;
      c.head_dim = d;
      c.heads = 14;
      c.kv_heads = 2;
      c.held = std::vector<std::int32_t>{700, 0, 65};
      c.seqlen_q = 3;
      c.seqlen_new = 2;
      c.capacity = 768;
      c.page_size = splits == 5 ? 0 : 7;
      c.seed = 100 + static_cast<std::uint64_t>(splits);
      std::vector<std::uint16_t> bits[2];
      int i = 0;
      for (cuda::KVCombine combine : {cuda::KVCombine::fused, cuda::KVCombine::separate}) {
        const std::string failures = run_and_judge(c, 0, combine, &bits[i++]);
        EXPECT_TRUE(failures.empty()) << c.describe() << " splits=" << splits << " combine="
                                      << cuda::kv_combine_text(combine) << ":" << failures;
      }
      // Informational (both share kv_combine_row; nothing relies on it yet): whether the two
      // merges give the same bits, which would let eager calls and plans pick different ones.
      std::printf("[ combine ] d=%d splits=%d: fused and separate combine %s\n", d, splits,
                  bits[0] == bits[1] ? "bitwise equal" : "differ in bits");
    }
  }
#endif
}

// The fused combine (the last split of a row block merges them, counted by atomics) with many
// row blocks and splits: chunked prefill (128-row tiles, several row blocks per KV head), a
// ragged batch, GQA 7:1, window and softcap, paged with page sizes 1 and 3; plan-chosen and
// forced splits. The counters start poisoned in run_and_judge: the eager launch's memset zeroes
// them.
TEST_F(CudaKVCacheKernel, FusedCombineMatchesFloat64) {
#if FASTATTN_TESTS_CUDA
  for (int splits : {0, 3, 17}) {
    std::optional<ScopedEnv> env;
    if (splits > 0) env.emplace("FASTATTN_CUDA_NUM_SPLITS", std::to_string(splits));
    for (int d : build_info().cuda_head_dims) {
      KVCase c;
      c.head_dim = d;
      c.heads = 14;
      c.kv_heads = 2;
      c.held = std::vector<std::int32_t>{1, 0, 17, 900};
      c.seqlen_q = splits == 17 ? 40 : 1;
      c.seqlen_new = splits == 17 ? 40 : 1;
      c.capacity = 1024;
      c.page_size = splits == 3 ? 1 : 3;
      c.window_left = splits == 3 ? 300 : -1;
      c.softcap = splits == 0 ? 30.0f : 0.0f;
      c.seed = 300 + static_cast<std::uint64_t>(splits);
      const std::string failures = run_and_judge(c, 0, cuda::KVCombine::fused);
      EXPECT_TRUE(failures.empty()) << c.describe() << " splits=" << splits << ":" << failures;
    }
  }
#endif
}

// kv_cache_forward captured once in a CUDA graph (append + attention + combine), replayed with
// seqlens and the block table changed on the device: bitwise equal to eager calls.
TEST_F(CudaKVCacheKernel, GraphReplayWithChangedSeqlensIsBitwiseEager) {
#if FASTATTN_TESTS_CUDA
  KVCase c;
  c.heads = 32;
  c.kv_heads = 8;
  c.held = std::vector<std::int32_t>{1000, 7, 300};
  c.capacity = 2048;
  c.page_size = 16;
  c.seqlen_new = 1;
  c.nan_outside = false;  // the variants below make other slots visible
  const KVRun r = make_inputs(c);
  cudaStream_t stream = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  DeviceCall call(c, r, stream);
  const cuda::KVCacheLaunch launch = cuda::kv_cache_plan(call.problem, c.capacity);
  ASSERT_GT(launch.num_splits, 1) << launch.reason << ": the graph should hold the combine too";
  DeviceBuffer scratch(launch.scratch_bytes);
  DeviceBuffer cache_k(r.cache.k), cache_v(r.cache.v);  // the cache before any append

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    cuda::kv_cache_forward(call.problem, launch, scratch.data);
  } catch (...) {  // end the capture, so the thread's later CUDA calls (other tests) still work
    cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  const std::vector<std::vector<std::int32_t>> variants = {{1000, 7, 300}, {2047, 0, 1}, {16, 1500, 31}, {3, 3, 3}};
  std::vector<std::uint16_t> previous_out;
  for (std::size_t variant = 0; variant < variants.size(); ++variant) {
    const std::vector<std::int32_t>& seqlens = variants[variant];
    // Other pages for the same sequences: the table rotated (still distinct pages, so appends of
    // different sequences never share a slot).
    std::vector<std::int32_t> table = r.cache.block_table;
    std::rotate(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(variant * 5 % table.size()), table.end());
    struct Result {
      std::vector<std::uint16_t> out;
      std::vector<float> lse;
      std::vector<std::uint16_t> k, v;
    } results[2];
    for (int eager = 0; eager < 2; ++eager) {
      // Restore the cache, set the values, poison the outputs: all outside the graph.
      cuda_ok(cudaMemcpy(call.k.data, cache_k.data, cache_k.bytes, cudaMemcpyDeviceToDevice), "restore k");
      cuda_ok(cudaMemcpy(call.v.data, cache_v.data, cache_v.bytes, cudaMemcpyDeviceToDevice), "restore v");
      call.seqlens.upload(seqlens);
      call.block_table.upload(table);
      call.poison();
      if (eager == 0) {
        cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      } else {
        cuda::kv_cache_forward(call.problem, launch, scratch.data);
      }
      cuda_ok(cudaStreamSynchronize(stream), eager ? "eager call" : "graph replay");
      call.fetch_outputs();
      Result& res = results[eager];
      for (std::int64_t i = 0; i < call.out.numel(); ++i) res.out.push_back(static_cast<std::uint16_t>(call.out.bits(i)));
      for (std::int64_t i = 0; i < call.lse.numel(); ++i) res.lse.push_back(static_cast<float>(call.lse.get(i)));
      res.k = call.k.download<std::uint16_t>();
      res.v = call.v.download<std::uint16_t>();
    }
    const std::string what = "seqlens " + std::to_string(seqlens[0]) + "," + std::to_string(seqlens[1]) + "," +
                             std::to_string(seqlens[2]);
    EXPECT_EQ(results[0].out, results[1].out) << what;
    EXPECT_EQ(std::memcmp(results[0].lse.data(), results[1].lse.data(), results[0].lse.size() * sizeof(float)), 0)
        << what;
    EXPECT_EQ(results[0].k, results[1].k) << what;
    EXPECT_EQ(results[0].v, results[1].v) << what;
    EXPECT_NE(results[0].out, previous_out) << what << ": the replay should follow the new seqlens";
    previous_out = results[0].out;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
#endif
}

}  // namespace
}  // namespace fastattn::testing
