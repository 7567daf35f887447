// gpu_kv_cache_kernel_support.hpp — the device cases of the CUDA KV-cache kernel tests
// (src/cuda/inference/kv_cache.hpp: kv_cache_plan / kv_cache_forward), shared by
// gpu_kv_cache_kernel_cases_test.cpp (cases judged against float64) and
// gpu_kv_cache_kernel_graph_test.cpp (a captured call replayed in a CUDA graph).
//
// A KVCase describes a call; make_inputs builds its host images: a contiguous or paged cache
// (pages shuffled through the block table, spare pages), ragged cache lengths, an optional
// append. Cache slots past each sequence's length and pages no sequence uses hold NaN, so a read
// outside the visible keys shows up; the expected cache is the host's append. DeviceCall puts a
// run on the device as a KVCacheProblem, with out and lse poisoned. Its own namespace, so these
// names do not meet kv_cache_support.hpp's KVCase in the same executable.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "harness/random.hpp"
#include "harness/tensors.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing::kv_cache_kernel {

// One fixture type for the suite's tests in every file (gtest requires it).
class CudaKVCacheKernel : public GpuTest {};

#if FASTATTN_TESTS_CUDA
inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorCode::device_error, std::string(what) + ": " + cudaGetErrorString(status));
}

// Whether device 0 is an sm90 GPU, where the kernel has TMA loads (kv_cache_heuristics.hpp: KVLoad).
inline bool device_is_sm90() {
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  return prop.major == 9;
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
inline std::int64_t attended_length(const KVCase& c, std::int64_t b, std::int64_t capacity) {
  return std::clamp<std::int64_t>(std::int64_t{c.held[static_cast<std::size_t>(b)]} + c.seqlen_new, 0, capacity);
}

inline std::vector<std::uint16_t> random_bits(harness::Random& rng, DType dtype, std::int64_t n, double scale) {
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

inline KVRun make_inputs(const KVCase& c) {
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

// Whether a plan takes TMA loads under FASTATTN_CUDA_KV_LOAD=tma (a contiguous cache at
// head_dim d): an sm90 device, and kernel code compiled for sm_90 in this build (below it the
// TMA instructions are traps, which would take the context down with them).
inline bool tma_loads_available(std::int64_t d) {
  if (!device_is_sm90()) return false;
  const ScopedEnv env("FASTATTN_CUDA_KV_LOAD", std::string("tma"));
  KVCase c;
  c.head_dim = d;
  c.held = std::vector<std::int32_t>{64};
  c.capacity = 64;
  c.page_size = 0;
  try {
    const KVRun r = make_inputs(c);
    DeviceCall call(c, r, nullptr);
    return cuda::kv_cache_plan(call.problem, r.cache.capacity).load == cuda::KVLoad::tma;
  } catch (const Error&) {
    return false;
  }
}
#endif

}  // namespace fastattn::testing::kv_cache_kernel
