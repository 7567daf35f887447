// gpu_merge_states_test.cpp — fastattn::merge_states on CUDA (ctest label `gpu`).
//
// The split-and-merge check of merge_support.hpp with every call on cuda:0: forward() on each
// key part and the merge run on device mirrors of the harness tensors, on a non-default stream.
// The merge is judged against the float64 oracle of the unsplit call and, row by row, against a
// float64 merge of its own inputs; the CUDA merge is also compared with the CPU merge of the
// same inputs. Skipped without a CUDA build or device (GpuTest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/inference/merge_states.hpp"
#include "merge_support.hpp"
#include "test_support.hpp"

#if FASTATTN_TESTS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::testing {
namespace {

#if FASTATTN_TESTS_CUDA
void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw Error(ErrorCode::device_error, std::string(what) + ": " + cudaGetErrorString(status));
}

// Each host tensor's whole allocation (guards included) mirrored on cuda:0, at the same offsets,
// so the harness's poison and padding checks see what the device wrote.
class DevicePlace : public Place {
 public:
  DevicePlace() { cuda_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~DevicePlace() override {
    for (auto& entry : mirrors_) cudaFree(entry.second.device);
    cudaStreamDestroy(stream_);
  }
  Backend backend() const override { return Backend::cuda; }
  void* stream() override { return stream_; }
  TensorView view(harness::HostTensor& t) override {
    Mirror& m = mirrors_[&t];
    if (m.device == nullptr) {
      cuda_ok(cudaMalloc(&m.device, t.storage_bytes()), "cudaMalloc");
      cuda_ok(cudaMemcpy(m.device, t.storage(), t.storage_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    }
    TensorView v = t.view();
    v.data = static_cast<std::uint8_t*>(m.device) + (static_cast<const std::uint8_t*>(v.data) - t.storage());
    v.device = Device::cuda(0);
    return v;
  }
  void copy_back(harness::HostTensor& t) override {
    cuda_ok(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const auto it = mirrors_.find(&t);
    if (it == mirrors_.end()) return;
    cuda_ok(cudaMemcpy(t.storage(), it->second.device, t.storage_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  struct Mirror {
    void* device = nullptr;
  };
  std::map<const harness::HostTensor*, Mirror> mirrors_;
  cudaStream_t stream_ = nullptr;
};
#endif

class CudaMergeStates : public GpuTest {};

#if FASTATTN_TESTS_CUDA
// The forward's head dims and dtypes in this build (merge itself takes any head_dim and f32).
std::vector<std::string> cuda_split_cases() {
  std::vector<std::string> cases;
  for (int d : build_info().cuda_head_dims) {
    const std::string dim = " d=" + std::to_string(d);
    cases.push_back("b=2 sq=7 sk=40 h=4 hkv=2" + dim + " dtype=bf16 mask=none");
    cases.push_back("b=1 sq=1 sk=300 h=8 hkv=1" + dim + " dtype=f16 mask=causal");
    cases.push_back("b=2 sq=63 sk=63 h=2 hkv=1" + dim + " dtype=bf16 mask=causal");
    cases.push_back("b=1 sq=63 sk=40 h=3 hkv=3" + dim + " dtype=f16 mask=causal");
  }
  return cases;
}
#endif

TEST_F(CudaMergeStates, SplitMergeMatchesUnsplitForwardAndFloat64) {
#if FASTATTN_TESTS_CUDA
  for (const std::string& text : cuda_split_cases()) {
    const harness::Case c = harness::parse_case(text);
    for (std::int64_t split : {c.seqlen_k / 3, c.seqlen_k - 1}) {
      // Strided layouts have an unaligned base: the forward needs aligned rows (contiguous
      // only); in-place merges into the forward's own out / lse.
      for (bool in_place : {false, true}) {
        MergeLayout layout;
        layout.in_place = in_place;
        DevicePlace gpu;
        const SplitMergeReport r = check_split_merge(c, split, gpu, layout);
        EXPECT_TRUE(r.pass) << r.to_string();
        EXPECT_EQ(r.merge_choice.backend, Backend::cuda) << r.to_string();
        EXPECT_NE(r.merge_choice.kernel.find(".vec8"), std::string::npos) << r.merge_choice.describe();
      }
    }
  }
#endif
}

// A part with no keys at all (split at 0 or seqlen_k): forward() on seqlen_k = 0 gives out 0 and
// lse -inf for every row, and the merge returns the other part. Separate from the test above,
// so that a failure here points at the empty forward call first.
TEST_F(CudaMergeStates, EmptyKeyPartMergesToTheOtherPart) {
#if FASTATTN_TESTS_CUDA
  for (const std::string& text : cuda_split_cases()) {
    const harness::Case c = harness::parse_case(text);
    for (std::int64_t split : {std::int64_t{0}, c.seqlen_k}) {
      DevicePlace gpu;
      const SplitMergeReport r = check_split_merge(c, split, gpu);
      EXPECT_TRUE(r.pass) << r.to_string();
    }
  }
#endif
}

// The merge alone on inputs the CPU made, in every dtype, odd head dims and strided (unaligned:
// the element-wise kernel) layouts: CUDA and CPU merges of the same inputs agree within one
// rounding of the dtype; special rows (-inf, NaN) follow the same rule.
TEST_F(CudaMergeStates, MatchesCpuMergeEveryDtypeAndLayout) {
#if FASTATTN_TESTS_CUDA
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (std::int64_t d : {8, 64, 72, 128, 256, 3}) {
      for (bool strided : {false, true}) {
        harness::Case c;  // the shapes of make_out / make_lse; head_dim need not suit forward()
        c.batch = 2;
        c.seqlen_q = 7;
        c.num_heads = 3;
        c.head_dim = d;
        harness::HostTensor a = make_out(dtype, c, strided), b = make_out(dtype, c, strided);
        harness::HostTensor la = make_lse(c, strided), lb = make_lse(c, strided);
        harness::HostTensor cpu_out = make_out(dtype, c, strided), cpu_lse = make_lse(c, strided);
        harness::HostTensor gpu_out = make_out(dtype, c, strided), gpu_lse = make_lse(c, strided);
        for (std::int64_t i = 0; i < a.numel(); ++i) {
          a.set(i, std::sin(0.37 * static_cast<double>(i)) + 0.05);
          b.set(i, std::cos(0.11 * static_cast<double>(i)) - 0.3);
        }
        for (std::int64_t i = 0; i < la.numel(); ++i) {
          const double x = 5.0 * std::sin(1.7 * static_cast<double>(i));
          la.set(i, i % 9 == 0 ? -inf : i == 4 ? std::numeric_limits<double>::quiet_NaN() : x);
          lb.set(i, i % 6 == 0 ? -inf : 5.0 * std::cos(0.3 * static_cast<double>(i)));
        }
        for (harness::HostTensor* t : {&gpu_out, &gpu_lse}) t->fill_view_bits(harness::poison_bits(t->dtype()));
        merge_states(a.view(), la.view(), b.view(), lb.view(), cpu_out.view(), cpu_lse.view());
        DevicePlace gpu;
        MergeOptions o;
        o.cuda_stream = gpu.stream();
        const KernelChoice k = merge_states(gpu.view(a), gpu.view(la), gpu.view(b), gpu.view(lb), gpu.view(gpu_out),
                                            gpu.view(gpu_lse), o);
        gpu.copy_back(gpu_out);
        gpu.copy_back(gpu_lse);
        const bool vector_path = !strided && d % static_cast<std::int64_t>(16 / dtype_size(dtype)) == 0;
        EXPECT_EQ(k.kernel.find(".scalar") == std::string::npos, vector_path) << k.describe();
        const std::string where = std::string(to_string(dtype)) + " d=" + std::to_string(d) + (strided ? " strided" : "");
        EXPECT_EQ(gpu_out.count_guard_clobbered(), 0) << where;
        EXPECT_EQ(gpu_lse.count_guard_clobbered(), 0) << where;
        const double eps = harness::epsilon(dtype);
        for (std::int64_t i = 0; i < cpu_out.numel(); ++i) {
          const double x = gpu_out.get(i), y = cpu_out.get(i);
          if (std::isnan(y)) {
            EXPECT_TRUE(std::isnan(x)) << where << " out element " << i;
          } else {
            EXPECT_NEAR(x, y, eps * std::fabs(y) + 1e-6) << where << " out element " << i;
          }
        }
        for (std::int64_t i = 0; i < cpu_lse.numel(); ++i) {
          const double x = gpu_lse.get(i), y = cpu_lse.get(i);
          if (std::isnan(y) || std::isinf(y)) {
            EXPECT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << where << " lse element " << i;
          } else {
            EXPECT_NEAR(x, y, 1e-5 * (std::fabs(y) + 1.0)) << where << " lse element " << i;
          }
        }
      }
    }
  }
#endif
}

// Host-only: the launch plan (src/cuda/inference/merge_states.hpp), checked in every build.
TEST(CudaMergePlan, VectorWidthAndBlockShape) {
  alignas(16) static std::uint16_t buffer[16];
  MergeProblem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.seqlen_q = 3;
  p.num_heads = 5;
  p.head_dim = 128;
  for (Operand* op : {&p.out_a, &p.out_b, &p.out}) *op = {buffer, {3 * 5 * 128, 5 * 128, 128}};
  cuda::MergeLaunch l = cuda::plan_merge(p);
  EXPECT_EQ(l.vector_elems, 8);
  EXPECT_EQ(l.threads_x, 16);
  EXPECT_EQ(l.threads_y, 16);
  EXPECT_EQ(l.blocks, 2);  // 30 rows, 16 per block
  p.out_b.data = buffer + 1;  // unaligned
  l = cuda::plan_merge(p);
  EXPECT_EQ(l.vector_elems, 1);
  EXPECT_EQ(l.threads_x, 32);
  EXPECT_EQ(std::string(l.why_scalar), "an out row is not 16-byte aligned (data pointer or strides)");
  p.out_b.data = buffer;
  p.head_dim = 72;  // 144 bytes: a multiple of 16
  EXPECT_EQ(cuda::plan_merge(p).vector_elems, 8);
  p.head_dim = 12;  // 24 bytes: not
  EXPECT_EQ(cuda::plan_merge(p).vector_elems, 1);
  EXPECT_EQ(std::string(cuda::plan_merge(p).why_scalar), "head_dim is not a multiple of 16 bytes");
}

}  // namespace
}  // namespace fastattn::testing
