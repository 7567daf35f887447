// gpu_kv_cache_test.cpp — attention_with_kv_cache and KVCachePlan on CUDA (ctest label `gpu`),
// against the float64 oracle with the checks of kv_cache_support.hpp (every tensor mirrored on
// cuda:0 with its padding and guards, so poison, guard and append checks apply unchanged).
//
// The grid: cache lengths 0, 1, 17, a ragged batch and long caches over several splits;
// contiguous caches and page sizes 1, 3, 16, 64, 256; seqlen_q 1, 4, 8, 16 (multi-token decode)
// and 33 (chunked prefill); GQA 4:1, 7:1 and MQA; masks, soft-cap, appends, strided (16-byte
// aligned) layouts, f16 and bf16, the head dims of this build. Then: plan.run bitwise equal to the eager call;
// a CUDA graph of plan.run replayed while cache.seqlens and the block table change on the device,
// bitwise equal to plan.run outside the graph, with and without an append; the value errors of
// an eager call (read back from the device) with nothing written. Skipped without a CUDA build
// or device (GpuTest).
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kv_cache_support.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing {
namespace {

class CudaKVCache : public GpuTest {};

#if FASTATTN_TESTS_CUDA
void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorCode::device_error, std::string(what) + ": " + cudaGetErrorString(status));
}

// Each host tensor's whole allocation (guards included) mirrored on cuda:0 at the same offsets,
// uploaded at its first view; calls on a non-blocking stream.
class DevicePlace : public Place {
 public:
  DevicePlace() { cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~DevicePlace() override {
    for (auto& entry : mirrors_) cudaFree(entry.second);
    cudaStreamDestroy(stream_);
  }
  Backend backend() const override { return Backend::cuda; }
  void* stream() override { return stream_; }
  TensorView view(harness::HostTensor& t) override {
    void*& device = mirrors_[&t];
    if (device == nullptr) {
      cuda_ok(cudaMalloc(&device, t.storage_bytes()), "cudaMalloc");
      cuda_ok(cudaMemcpy(device, t.storage(), t.storage_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    }
    TensorView v = t.view();
    v.data = static_cast<std::uint8_t*>(device) + (static_cast<const std::uint8_t*>(v.data) - t.storage());
    v.device = Device::cuda(0);
    return v;
  }
  void copy_back(harness::HostTensor& t) override {
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const auto it = mirrors_.find(&t);
    if (it == mirrors_.end()) return;
    cuda_ok(cudaMemcpy(t.storage(), it->second, t.storage_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }
  // Uploads the host tensor again (after the test changed it on the host).
  void upload(harness::HostTensor& t) {
    view(t);
    cuda_ok(cudaMemcpyAsync(mirrors_[&t], t.storage(), t.storage_bytes(), cudaMemcpyHostToDevice, stream_),
            "cudaMemcpyAsync to device");
  }
  cudaStream_t cuda_stream() const { return stream_; }

 private:
  std::map<const harness::HostTensor*, void*> mirrors_;
  cudaStream_t stream_ = nullptr;
};

// Every (cache lengths, page size) pair with two of the query counts, rotating, so each count
// meets short, ragged and long caches; heads, dtypes, head dims, masks, appends and layouts
// rotated over the cases (60 cases; the float64 oracle of the long ones takes a second each).
std::vector<KVCase> cuda_grid() {
  std::vector<KVCase> cases;
  const std::vector<std::vector<std::int32_t>> lens = {{0}, {1}, {17}, {17, 0, 1, 40}, {3000, 300, 1}};
  const std::int64_t pages[] = {0, 1, 3, 16, 64, 256};
  const std::int64_t queries[] = {1, 4, 8, 16, 33};
  const std::int64_t heads[][2] = {{32, 8}, {14, 2}, {8, 1}, {4, 4}};
  const std::vector<int> dims = build_info().cuda_head_dims;
  int n = 0;
  for (const auto& l : lens) {
    for (std::int64_t page : pages) {
      for (int pick = 0; pick < 2; ++pick) {
        const std::int64_t sq = queries[(n / 2 + 2 * pick) % 5];
        KVCase c;
        c.cache_lens = l;
        c.page_size = page;
        c.seqlen_q = sq;
        c.num_heads = heads[n % 4][0];
        c.num_kv_heads = heads[n % 4][1];
        c.head_dim = dims.empty() ? 128 : dims[static_cast<std::size_t>(n / 3) % dims.size()];
        c.dtype = n % 2 == 0 ? DType::bf16 : DType::f16;
        switch (n % 5) {
          case 0: c.causal = true; break;
          case 1: c.causal = false; break;
          case 2: c.causal = true; c.window_left = 37; break;
          case 3: c.causal = false; c.window_left = 20; c.window_right = 3; break;
          case 4: c.causal = true; c.softcap = 30.0f; break;
        }
        c.seqlen_new = n % 3 == 0 ? 0 : (n % 3 == 1 ? 1 : sq);
        c.layout = n % 3 == 2 ? KVLayout::strided : KVLayout::dense;
        c.shuffle_pages = n % 4 != 3;
        c.with_lse = n % 7 != 6;
        c.seed = 5000 + static_cast<std::uint64_t>(n);
        cases.push_back(c);
        ++n;
      }
    }
  }
  return cases;
}

TEST_F(CudaKVCache, EagerMatchesFloat64) {
  for (const KVCase& c : cuda_grid()) {
    DevicePlace device;
    const KVReport r = check_kv_eager(c, device);
    EXPECT_TRUE(r.pass) << r.text;
    EXPECT_EQ(r.choice.backend, Backend::cuda) << r.text;
  }
}

TEST_F(CudaKVCache, PlanMatchesFloat64) {
  for (const KVCase& c : cuda_grid()) {
    DevicePlace device;
    const KVReport r = check_kv_plan(c, device);
    EXPECT_TRUE(r.pass) << r.text;
  }
}

// out and lse (raw bytes) of one call on a fresh device place.
struct DeviceOutputs {
  std::vector<std::uint8_t> out, lse, k_cache;
  std::string kernel;
};

TEST_F(CudaKVCache, PlanRunIsBitwiseEqualToEager) {
  for (const KVCase& c : cuda_grid()) {
    DeviceOutputs results[2];
    for (int planned = 0; planned < 2; ++planned) {
      KVData data(c);
      data.poison_outputs();
      DevicePlace device;
      const KVData::Views v = data.views(device);
      AttentionOptions o = data.options(Backend::cuda);
      o.cuda_stream = device.stream();
      if (planned) {
        KVCacheShape shape = kv_cache_shape(v.q, v.cache, v.lse, v.append);
        shape.max_cache_len = c.longest();
        const KVCachePlan plan(shape, o);
        results[planned].kernel = plan.run(v.q, v.cache, v.out, v.lse, v.append).kernel;
      } else {
        results[planned].kernel = attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, o).kernel;
      }
      data.copy_back(device);
      results[planned].out = data.out.snapshot();
      results[planned].lse = data.lse.snapshot();
      results[planned].k_cache = data.k_cache.snapshot();
    }
    EXPECT_EQ(results[0].kernel, results[1].kernel) << c.to_string();
    EXPECT_TRUE(results[0].out == results[1].out) << c.to_string();
    EXPECT_TRUE(results[0].lse == results[1].lse) << c.to_string();
    EXPECT_TRUE(results[0].k_cache == results[1].k_cache) << c.to_string();
  }
}

// A CUDA graph of one plan.run, replayed while cache.seqlens and the block table change on the
// device (written by cudaMemcpyAsync on the stream, as an engine's step would), equals plan.run
// outside the graph on the same inputs, bit for bit. With an append the cache is restored from
// a pristine device copy before each run, so every run starts from the same state.
void check_graph_replay(const KVCase& base, const std::vector<std::vector<std::int32_t>>& steps) {
  KVData data(base);
  DevicePlace device;
  const cudaStream_t stream = device.cuda_stream();
  KVData::Views v = data.views(device);
  AttentionOptions o = data.options(Backend::cuda);
  const KVCachePlan plan(kv_cache_shape(v.q, v.cache, v.lse, v.append), o);  // sized for the capacity
  const std::size_t cache_bytes = data.k_cache.storage_bytes();
  void* pristine_k = nullptr;
  void* pristine_v = nullptr;
  cuda_ok(cudaMalloc(&pristine_k, cache_bytes), "cudaMalloc");
  cuda_ok(cudaMalloc(&pristine_v, cache_bytes), "cudaMalloc");
  const auto k_base = static_cast<std::uint8_t*>(v.cache.k.data) - (static_cast<const std::uint8_t*>(data.k_cache.view().data) - data.k_cache.storage());
  const auto v_base = static_cast<std::uint8_t*>(v.cache.v.data) - (static_cast<const std::uint8_t*>(data.v_cache.view().data) - data.v_cache.storage());
  cuda_ok(cudaMemcpyAsync(pristine_k, k_base, cache_bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  cuda_ok(cudaMemcpyAsync(pristine_v, v_base, cache_bytes, cudaMemcpyDeviceToDevice, stream), "copy");
  auto restore = [&] {
    cuda_ok(cudaMemcpyAsync(k_base, pristine_k, cache_bytes, cudaMemcpyDeviceToDevice, stream), "restore");
    cuda_ok(cudaMemcpyAsync(v_base, pristine_v, cache_bytes, cudaMemcpyDeviceToDevice, stream), "restore");
  };

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cuda_ok(cudaStreamSynchronize(stream), "sync");
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  plan.run(v.q, v.cache, v.out, v.lse, v.append, stream);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  for (const std::vector<std::int32_t>& lens : steps) {
    KVCase step = base;
    step.cache_lens = lens;
    for (std::size_t b = 0; b < lens.size(); ++b) data.seqlens.set(static_cast<std::int64_t>(b), lens[b]);
    device.upload(data.seqlens);  // the block table stays; its slots cover the capacity
    std::vector<std::uint8_t> outputs[2];
    for (int replay = 0; replay < 2; ++replay) {
      restore();
      data.poison_outputs();
      device.upload(data.out);
      device.upload(data.lse);
      if (replay) {
        cuda_ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      } else {
        plan.run(v.q, v.cache, v.out, v.lse, v.append, stream);
      }
      data.copy_back(device);
      outputs[replay] = data.out.snapshot();
      const std::vector<std::uint8_t> lse = data.lse.snapshot();
      outputs[replay].insert(outputs[replay].end(), lse.begin(), lse.end());
      EXPECT_EQ(data.out.count_view_bits(harness::poison_bits(data.out.dtype())), 0) << step.to_string();
    }
    EXPECT_TRUE(outputs[0] == outputs[1]) << "graph replay differs from plan.run: " << step.to_string();
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFree(pristine_k);
  cudaFree(pristine_v);
}

TEST_F(CudaKVCache, GraphReplayWithChangingSeqlensIsBitwiseEqual) {
  const std::vector<int> dims = build_info().cuda_head_dims;
  KVCase c;
  c.cache_lens = {4000, 100, 1};
  c.page_size = 16;
  c.num_heads = 32;
  c.num_kv_heads = 8;
  c.head_dim = dims.empty() ? 128 : dims.back();
  c.dtype = DType::bf16;
  c.spare = 64;
  c.slots = 300;  // capacity 4800 tokens per sequence
  const std::vector<std::vector<std::int32_t>> steps = {{4000, 100, 1}, {4001, 101, 2}, {17, 4000, 0}, {0, 0, 0}, {4500, 1, 33}};
  // Steps must stay within each sequence's pages: give every sequence enough pages.
  c.cache_lens = {4500, 4500, 4500};
  check_graph_replay(c, steps);
  c.seqlen_new = 1;
  c.seqlen_q = 1;
  check_graph_replay(c, steps);
  c.seqlen_new = 4;
  c.seqlen_q = 4;
  c.dtype = DType::f16;
  check_graph_replay(c, steps);
}

// The value checks of an eager call read seqlens and the block table back from the device:
// the same messages as on the CPU, nothing written.
TEST_F(CudaKVCache, ValueErrorsWriteNothing) {
  KVCase c;
  c.cache_lens = {5, 9};
  c.seqlen_q = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  const std::vector<int> dims = build_info().cuda_head_dims;
  c.head_dim = dims.empty() ? 64 : dims.front();
  c.seqlen_new = 2;
  c.page_size = 4;
  c.spare = 2;
  struct Breakage {
    const char* needle;
    int seqlen0;        // -100: unchanged
    int table_entry;    // written at [1][2] when >= -1... -100: unchanged
  };
  const Breakage breakages[] = {
      {"cache.block_table: expected entries in [0, num_pages = 7)", -100, 7},
      {"cache.seqlens: expected values <= the capacity 16", 17, -100},
      {"append.k: expected seqlen_new (shape[1]) = 2 new tokens to fit the cache after cache.seqlens[0] = 15", 15, -100},
  };
  for (const Breakage& b : breakages) {
    KVData data(c);
    if (b.seqlen0 != -100) data.seqlens.set(0, b.seqlen0);
    if (b.table_entry != -100) data.block_table.set(1 * 4 + 2, b.table_entry);
    data.poison_outputs();
    const std::vector<std::uint8_t> k_before = data.k_cache.snapshot();
    DevicePlace device;
    const KVData::Views v = data.views(device);
    AttentionOptions o = data.options(Backend::cuda);
    o.cuda_stream = device.stream();
    expect_error([&] { attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, o); }, ErrorCode::invalid_argument,
                 b.needle);
    data.copy_back(device);
    EXPECT_EQ(data.out.count_view_bits(harness::poison_bits(data.out.dtype())), data.out.numel()) << b.needle;
    EXPECT_TRUE(data.k_cache.snapshot() == k_before) << b.needle;
  }
}
#else
TEST_F(CudaKVCache, NeedsCuda) {}
#endif

}  // namespace
}  // namespace fastattn::testing
