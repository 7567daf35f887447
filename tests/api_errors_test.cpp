// api_errors_test.cpp — every argument error of the public API: its code, its message (argument,
// expected, actual, as written in src/api/validate.cpp) and that nothing was written.
//
// Each test starts from a valid call (checked to run) and breaks one thing. Both the plan_* and
// the running entry point must throw, and afterwards every buffer, inputs and outputs alike,
// must hold exactly its old bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "test_support.hpp"

namespace fastattn::testing {
namespace {

constexpr std::int64_t B = 2, SQ = 5, SK = 7, H = 4, HKV = 2, D = 16;
constexpr std::int64_t TQ = 8, TK = 10;  // varlen totals: cu_q = {0, 3, 8}, cu_k = {0, 6, 10}

struct Call {
  TensorView q, k, v, out, dout, dq, dk, dv, lse;
  bool with_lse = true;  // forward only; backward always passes lse
  AttentionOptions o;
};

class ApiErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    // Twice the largest view, so strided views of the same buffers stay inside them.
    const std::size_t qn = 2 * B * SQ * H * D, kn = 2 * B * SK * HKV * D;
    auto filled = [](std::size_t n, float scale) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = scale * static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.0));
      return x;
    };
    q_ = filled(qn, 1.0f);
    k_ = filled(kn, 0.5f);
    v_ = filled(kn, 2.0f);
    dout_ = filled(qn, 1.5f);
    out_.assign(qn, 123.0f);
    dq_.assign(qn, 123.0f);
    dk_.assign(kn, 123.0f);
    dv_.assign(kn, 123.0f);
    lse_.assign(2 * B * H * SQ, 123.0f);
    lse_in_ = filled(2 * B * H * SQ, 3.0f);
    cu_q_ = {0, 3, 8, 99};
    cu_k_ = {0, 6, 10, 99};
  }

  Call valid() {
    Call c;
    c.q = make_tensor(q_.data(), DType::f32, {B, SQ, H, D});
    c.k = make_tensor(k_.data(), DType::f32, {B, SK, HKV, D});
    c.v = make_tensor(v_.data(), DType::f32, {B, SK, HKV, D});
    c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D});
    c.lse = make_tensor(lse_.data(), DType::f32, {B, H, SQ});
    c.dout = make_tensor(dout_.data(), DType::f32, {B, SQ, H, D});
    c.dq = make_tensor(dq_.data(), DType::f32, {B, SQ, H, D});
    c.dk = make_tensor(dk_.data(), DType::f32, {B, SK, HKV, D});
    c.dv = make_tensor(dv_.data(), DType::f32, {B, SK, HKV, D});
    c.o.backend = Backend::reference;  // validation precedes dispatch; this always runs
    return c;
  }
  // Backward's lse is an input: a separate, finite buffer.
  Call valid_backward() {
    Call c = valid();
    c.lse = make_tensor(lse_in_.data(), DType::f32, {B, H, SQ});
    return c;
  }
  Call valid_varlen() {
    Call c;
    c.q = make_tensor(q_.data(), DType::f32, {TQ, H, D});
    c.k = make_tensor(k_.data(), DType::f32, {TK, HKV, D});
    c.v = make_tensor(v_.data(), DType::f32, {TK, HKV, D});
    c.out = make_tensor(out_.data(), DType::f32, {TQ, H, D});
    c.lse = make_tensor(lse_.data(), DType::f32, {H, TQ});
    c.dout = make_tensor(dout_.data(), DType::f32, {TQ, H, D});
    c.dq = make_tensor(dq_.data(), DType::f32, {TQ, H, D});
    c.dk = make_tensor(dk_.data(), DType::f32, {TK, HKV, D});
    c.dv = make_tensor(dv_.data(), DType::f32, {TK, HKV, D});
    c.o.cu_seqlens_q = make_tensor(cu_q_.data(), DType::i32, {B + 1});
    c.o.cu_seqlens_k = make_tensor(cu_k_.data(), DType::i32, {B + 1});
    c.o.backend = Backend::reference;
    return c;
  }

  static KernelChoice run_forward(const Call& c, bool plan) {
    const std::optional<TensorView> lse = c.with_lse ? std::optional<TensorView>(c.lse) : std::nullopt;
    return plan ? plan_forward(c.q, c.k, c.v, c.out, lse, c.o)
                : forward(c.q, c.k, c.v, c.out, lse, c.o);
  }
  static KernelChoice run_backward(const Call& c, bool plan) {
    return plan ? plan_backward(c.dout, c.q, c.k, c.v, c.out, c.lse, c.dq, c.dk, c.dv, c.o)
                : backward(c.dout, c.q, c.k, c.v, c.out, c.lse, c.dq, c.dk, c.dv, c.o);
  }

  std::vector<std::vector<std::uint8_t>> snapshot() const {
    std::vector<std::vector<std::uint8_t>> s;
    for (const std::vector<float>* b : {&q_, &k_, &v_, &out_, &lse_, &lse_in_, &dout_, &dq_, &dk_, &dv_}) {
      std::vector<std::uint8_t> bytes(b->size() * sizeof(float));
      std::memcpy(bytes.data(), b->data(), bytes.size());
      s.push_back(std::move(bytes));
    }
    for (const std::vector<std::int32_t>* b : {&cu_q_, &cu_k_}) {
      std::vector<std::uint8_t> bytes(b->size() * sizeof(std::int32_t));
      std::memcpy(bytes.data(), b->data(), bytes.size());
      s.push_back(std::move(bytes));
    }
    return s;
  }

  void expect_forward_error(const Call& c, const std::string& message,
                            ErrorCode code = ErrorCode::invalid_argument) {
    const auto before = snapshot();
    for (bool plan : {true, false}) {
      SCOPED_TRACE(plan ? "plan_forward" : "forward");
      expect_error([&] { run_forward(c, plan); }, code, message);
    }
    EXPECT_TRUE(snapshot() == before) << "a buffer was written by a call that threw";
  }
  void expect_backward_error(const Call& c, const std::string& message,
                             ErrorCode code = ErrorCode::invalid_argument) {
    const auto before = snapshot();
    for (bool plan : {true, false}) {
      SCOPED_TRACE(plan ? "plan_backward" : "backward");
      expect_error([&] { run_backward(c, plan); }, code, message);
    }
    EXPECT_TRUE(snapshot() == before) << "a buffer was written by a call that threw";
  }

  std::vector<float> q_, k_, v_, out_, lse_, lse_in_, dout_, dq_, dk_, dv_;
  std::vector<std::int32_t> cu_q_, cu_k_;
};

TEST_F(ApiErrors, ValidCallsRun) {
  EXPECT_NO_THROW(run_forward(valid(), false));
  EXPECT_NO_THROW(run_backward(valid_backward(), false));
  EXPECT_NO_THROW(run_forward(valid_varlen(), false));
  Call vb = valid_varlen();
  vb.lse = make_tensor(lse_in_.data(), DType::f32, {H, TQ});
  EXPECT_NO_THROW(run_backward(vb, false));
}

// ---- dtypes ---------------------------------------------------------------------------------

TEST_F(ApiErrors, DtypeMismatch) {
  Call c = valid();
  c.k.dtype = DType::f16;
  expect_forward_error(c, "k: expected dtype f32, got dtype f16");
  c = valid();
  c.v.dtype = DType::bf16;
  expect_forward_error(c, "v: expected dtype f32, got dtype bf16");
  c = valid();
  c.out.dtype = DType::f16;
  expect_forward_error(c, "out: expected dtype f32, got dtype f16");
  c = valid_backward();
  c.dout.dtype = DType::bf16;
  expect_backward_error(c, "dout: expected dtype f32, got dtype bf16");
  c = valid_backward();
  c.dk.dtype = DType::f16;
  expect_backward_error(c, "dk: expected dtype f32, got dtype f16");
}

TEST_F(ApiErrors, UnsupportedInputDtype) {
  Call c = valid();
  for (TensorView* t : {&c.q, &c.k, &c.v, &c.out}) t->dtype = DType::i32;
  expect_forward_error(c, "q: expected dtype f32, f16 or bf16, got dtype i32");
}

TEST_F(ApiErrors, LseWrongDtypeOrShape) {
  Call c = valid();
  c.lse.dtype = DType::f16;
  expect_forward_error(c, "lse: expected dtype f32, got dtype f16");
  c = valid();
  c.lse = make_tensor(lse_.data(), DType::f32, {B, H, SQ - 1});
  expect_forward_error(c, "lse: expected shape [2, 4, 5] ([batch, num_heads, seqlen_q]), got shape [2, 4, 4]");
  c = valid();
  c.lse = make_tensor(lse_.data(), DType::f32, {B, SQ, H});  // transposed
  expect_forward_error(c, "lse: expected shape [2, 4, 5]");
  c = valid();
  c.lse = make_tensor(lse_.data(), DType::f32, {B * H, SQ});
  expect_forward_error(c, "lse: expected rank 3, got rank 2 [8, 5]");
  c = valid_backward();
  c.lse.dtype = DType::bf16;
  expect_backward_error(c, "lse: expected dtype f32, got dtype bf16");
}

// ---- shapes ---------------------------------------------------------------------------------

TEST_F(ApiErrors, ShapeMismatch) {
  Call c = valid();
  c.k = make_tensor(k_.data(), DType::f32, {B, SK, HKV, 8});
  expect_forward_error(c, "k: expected head_dim shape[3] = 16 (as q), got 8");
  c = valid();
  c.v = make_tensor(v_.data(), DType::f32, {B, SK, HKV, 8});
  expect_forward_error(c, "v: expected head_dim shape[3] = 16 (as q), got 8");
  c = valid();
  c.k = make_tensor(k_.data(), DType::f32, {1, SK, HKV, D});
  c.v = make_tensor(v_.data(), DType::f32, {1, SK, HKV, D});
  expect_forward_error(c, "k: expected batch shape[0] = 2 (as q), got 1");
  c = valid();
  c.v = make_tensor(v_.data(), DType::f32, {B, SK - 1, HKV, D});
  expect_forward_error(c, "v: expected the batch and sequence sizes of k [2, 7, 2, 16], got [2, 6, 2, 16]");
  c = valid();
  c.v = make_tensor(v_.data(), DType::f32, {B, SK, 1, D});
  expect_forward_error(c, "v: expected num_kv_heads shape[2] = 2 (as k), got 1");
  c = valid();
  c.out = make_tensor(out_.data(), DType::f32, {B, SQ - 1, H, D});
  expect_forward_error(c, "out: expected shape [2, 5, 4, 16] (as q), got shape [2, 4, 4, 16]");
  c = valid_backward();
  c.dk = make_tensor(dk_.data(), DType::f32, {B, SK, H, D});
  expect_backward_error(c, "dk: expected shape [2, 7, 2, 16] (as k), got shape [2, 7, 4, 16]");
  c = valid_backward();
  c.dq = make_tensor(dq_.data(), DType::f32, {B, SQ, H, D / 2});
  expect_backward_error(c, "dq: expected shape [2, 5, 4, 16] (as q), got shape [2, 5, 4, 8]");
}

TEST_F(ApiErrors, WrongRank) {
  Call c = valid();
  c.q = make_tensor(q_.data(), DType::f32, {B * SQ, H, D});
  expect_forward_error(c, "q: expected rank 4 [batch, seqlen, heads, head_dim], got rank 3 [10, 4, 16]");
  c = valid_varlen();
  c.k = make_tensor(k_.data(), DType::f32, {1, TK, HKV, D});
  expect_forward_error(c, "k: expected rank 3 [total, heads, head_dim] (varlen), got rank 4 [1, 10, 2, 16]");
}

TEST_F(ApiErrors, NegativeSizesAndStrides) {
  Call c = valid();
  c.k.shape[1] = -7;
  expect_forward_error(c, "k: expected non-negative sizes, got [2, -7, 2, 16]");
  c = valid();
  c.q.stride[1] = -H * D;
  expect_forward_error(c, "q: expected non-negative strides, got stride[1] = -64");
}

TEST_F(ApiErrors, HeadDimNotAMultipleOf8OrTooLarge) {
  for (std::int64_t d : {12, 4, 0, 264}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    std::vector<float> big(static_cast<std::size_t>(B * SK * H * d) + 1, 1.0f), big_out(static_cast<std::size_t>(B * SQ * H * d) + 1, 0.0f);
    Call c = valid();
    c.q = make_tensor(big.data(), DType::f32, {B, SQ, H, d});
    c.k = make_tensor(big.data(), DType::f32, {B, SK, HKV, d});
    c.v = make_tensor(big.data(), DType::f32, {B, SK, HKV, d});
    c.out = make_tensor(big_out.data(), DType::f32, {B, SQ, H, d});
    c.with_lse = false;
    expect_forward_error(c, "q: expected head_dim (shape[3]) a multiple of 8 in [8, 256], got " + std::to_string(d));
  }
}

TEST_F(ApiErrors, HeadsNotDivisibleByKvHeads) {
  Call c = valid();
  c.k = make_tensor(k_.data(), DType::f32, {B, SK, 3, D});
  c.v = make_tensor(v_.data(), DType::f32, {B, SK, 3, D});
  expect_forward_error(c, "k: expected num_kv_heads (shape[2]) dividing q's num_heads = 4, got 3");
  c = valid();
  c.k = make_tensor(k_.data(), DType::f32, {B, SK, 0, D});
  c.v = make_tensor(v_.data(), DType::f32, {B, SK, 0, D});
  expect_forward_error(c, "k: expected at least one KV head (shape[2]), got 0");
}

TEST_F(ApiErrors, NonUnitHeadDimStride) {
  Call c = valid();
  c.q = make_tensor(q_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D * 2, H * D * 2, D * 2, 2});
  expect_forward_error(c, "q: expected a contiguous head_dim (stride[3] = 1), got stride 2");
  c = valid();
  c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D * 2, H * D * 2, D * 2, 2});
  expect_forward_error(c, "out: expected a contiguous head_dim (stride[3] = 1), got stride 2");
  c = valid_backward();
  c.dv = make_tensor(dv_.data(), DType::f32, {B, SK, HKV, D}, {SK * HKV * D * 2, HKV * D * 2, D * 2, 2});
  expect_backward_error(c, "dv: expected a contiguous head_dim (stride[3] = 1), got stride 2");
}

// ---- pointers, devices, memory --------------------------------------------------------------

TEST_F(ApiErrors, NullData) {
  Call c = valid();
  c.q.data = nullptr;
  expect_forward_error(c, "q: expected a non-null data pointer, got nullptr");
  c = valid();
  c.out.data = nullptr;
  expect_forward_error(c, "out: expected a non-null data pointer, got nullptr");
  c = valid();
  c.lse.data = nullptr;
  expect_forward_error(c, "lse: expected a non-null data pointer, got nullptr");
  c = valid_backward();
  c.dk.data = nullptr;
  expect_backward_error(c, "dk: expected a non-null data pointer, got nullptr");
}

TEST_F(ApiErrors, DeviceMismatch) {
  Call c = valid();
  c.k.device = Device::cuda(0);
  expect_forward_error(c, "k: expected device cpu (the device of q), got device cuda:0");
  c = valid();
  c.out.device = Device::cuda(0);
  expect_forward_error(c, "out: expected device cpu (the device of q), got device cuda:0");
  c = valid();
  c.lse.device = Device::cuda(1);
  expect_forward_error(c, "lse: expected device cpu (the device of q), got device cuda:1");
  c = valid_backward();
  c.dq.device = Device::cuda(0);
  expect_backward_error(c, "dq: expected device cpu (the device of q), got device cuda:0");
}

TEST_F(ApiErrors, CudaTensorsWithoutCudaBuild) {
  if (build_info().cuda_compiled) GTEST_SKIP() << "this build has CUDA";
  Call c = valid();
  for (TensorView* t : {&c.q, &c.k, &c.v, &c.out, &c.lse}) t->device = Device::cuda(0);
  expect_forward_error(c, "q: expected a cpu tensor (fastattn was built without CUDA), got device cuda:0",
                       ErrorCode::unsupported);
}

TEST_F(ApiErrors, CudaBackendForCpuTensors) {
  Call c = valid();
  c.o.backend = Backend::cuda;
  expect_forward_error(c, "options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda");
}

TEST_F(ApiErrors, OutputOverlapsAnInput) {
  Call c = valid();
  c.out.data = q_.data();
  expect_forward_error(c, "out: expected memory that does not overlap q, got an overlapping range");
  c = valid();
  c.out.data = v_.data() + 5;
  expect_forward_error(c, "out: expected memory that does not overlap v, got an overlapping range");
  c = valid();
  c.lse.data = out_.data() + 3;
  expect_forward_error(c, "lse: expected memory that does not overlap out, got an overlapping range");
  c = valid_backward();
  c.dq.data = dout_.data();
  expect_backward_error(c, "dq: expected memory that does not overlap dout, got an overlapping range");
  c = valid_backward();
  c.dk.data = dq_.data() + 16;
  expect_backward_error(c, "dq: expected memory that does not overlap dk, got an overlapping range");
  c = valid_backward();
  c.lse.data = dv_.data() + 8;  // lse (an input of backward) inside dv
  expect_backward_error(c, "dv: expected memory that does not overlap lse, got an overlapping range");
}

TEST_F(ApiErrors, OutputWithZeroStride) {
  Call c = valid();
  c.out.stride[1] = 0;
  expect_forward_error(c, "out: expected non-zero strides on an output, got stride[1] = 0");
}

// An output view whose rows overlap each other (head stride 8 < head_dim 16) writes some
// elements twice; validate.cpp's check_writable intends to reject such views ("Output views
// must not write one element twice") but only looks for zero strides.
TEST_F(ApiErrors, OutputWithSelfOverlappingRows) {
  Call c = valid();
  c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * 8, H * 8, 8, 1});
  expect_forward_error(c, "out: expected");
}

// ---- options --------------------------------------------------------------------------------

TEST_F(ApiErrors, WindowOptions) {
  Call c = valid();
  c.o.causal = true;
  c.o.window_right = 3;
  expect_forward_error(c, "options.window_right: expected -1 or 0 with causal, got 3");
  c = valid();
  c.o.window_left = -2;
  expect_forward_error(c, "options.window_left: expected >= -1 (-1: unbounded), got -2");
  c = valid();
  c.o.window_right = -5;
  expect_forward_error(c, "options.window_right: expected >= -1 (-1: unbounded), got -5");
}

TEST_F(ApiErrors, ScaleSoftcapThreads) {
  Call c = valid();
  c.o.softmax_scale = 0.0f;
  expect_forward_error(c, "options.softmax_scale: expected a finite non-zero value, got 0");
  c.o.softmax_scale = std::numeric_limits<float>::quiet_NaN();
  expect_forward_error(c, "options.softmax_scale: expected a finite non-zero value, got");
  c.o.softmax_scale = std::numeric_limits<float>::infinity();
  expect_forward_error(c, "options.softmax_scale: expected a finite non-zero value, got");
  c = valid();
  c.o.softcap = -1.0f;
  expect_forward_error(c, "options.softcap: expected 0 (off) or a finite positive value, got -1");
  c.o.softcap = std::numeric_limits<float>::infinity();
  expect_forward_error(c, "options.softcap: expected 0 (off) or a finite positive value, got");
  c = valid();
  c.o.num_threads = -1;
  expect_forward_error(c, "options.num_threads: expected >= 0 (0: default), got -1");
}

TEST_F(ApiErrors, WorkspaceWithNullData) {
  Call c = valid_backward();
  Workspace w{nullptr, 1024};
  c.o.workspace = &w;
  expect_backward_error(c, "options.workspace: expected a non-null data pointer when size > 0, got nullptr");
}

TEST_F(ApiErrors, WorkspaceTooSmallForCpuBackward) {
  Call c = valid_backward();
  c.o.backend = Backend::cpu;
  const KernelChoice plan = run_backward(c, true);
  if (plan.workspace_bytes == 0) GTEST_SKIP() << "the CPU backward needs no workspace here";
  std::vector<std::uint8_t> small(16);
  Workspace w{small.data(), small.size()};
  c.o.workspace = &w;
  const auto before = snapshot();
  expect_error([&] { run_backward(c, false); }, ErrorCode::invalid_argument,
               "options.workspace: expected at least " + std::to_string(plan.workspace_bytes) +
                   " bytes, got 16");
  EXPECT_TRUE(snapshot() == before) << "a buffer was written by a call that threw";
}

// ---- varlen ---------------------------------------------------------------------------------

TEST_F(ApiErrors, CuSeqlensGivenAlone) {
  Call c = valid_varlen();
  c.o.cu_seqlens_k.reset();
  expect_forward_error(c, "options.cu_seqlens_k: expected a tensor, since cu_seqlens_q is given, got none");
  c = valid_varlen();
  c.o.cu_seqlens_q.reset();
  expect_forward_error(c, "options.cu_seqlens_k: expected none, since cu_seqlens_q is not given, got a tensor");
}

TEST_F(ApiErrors, CuSeqlensWrongDtype) {
  Call c = valid_varlen();
  c.o.cu_seqlens_q->dtype = DType::f32;
  expect_forward_error(c, "options.cu_seqlens_q: expected dtype i32, got dtype f32");
}

TEST_F(ApiErrors, CuSeqlensWrongLength) {
  Call c = valid_varlen();
  c.o.cu_seqlens_k = make_tensor(cu_k_.data(), DType::i32, {B + 2});
  expect_forward_error(c, "options.cu_seqlens_k: expected shape [3] (batch + 1), got shape [4]");
  c = valid_varlen();
  c.o.cu_seqlens_q = make_tensor(cu_q_.data(), DType::i32, {0});
  expect_forward_error(c, "options.cu_seqlens_q: expected at least one element [batch + 1], got shape [0]");
  c = valid_varlen();
  c.o.cu_seqlens_q = make_tensor(cu_q_.data(), DType::i32, {1, B + 1});
  expect_forward_error(c, "options.cu_seqlens_q: expected rank 1, got rank 2 [1, 3]");
}

TEST_F(ApiErrors, CuSeqlensDecreasing) {
  cu_q_ = {0, 5, 3, 99};
  Call c = valid_varlen();
  expect_forward_error(c, "options.cu_seqlens_q: expected non-decreasing offsets, got options.cu_seqlens_q[2] = 3 < options.cu_seqlens_q[1] = 5");
}

TEST_F(ApiErrors, CuSeqlensPastTheTensor) {
  cu_q_ = {0, 3, 9, 99};
  Call c = valid_varlen();
  expect_forward_error(c, "options.cu_seqlens_q: expected last offset <= q.shape[0] = 8, got 9");
  cu_q_ = {0, 3, 8, 99};
  cu_k_ = {0, 6, 11, 99};
  c = valid_varlen();
  expect_forward_error(c, "options.cu_seqlens_k: expected last offset <= k.shape[0] = 10, got 11");
}

TEST_F(ApiErrors, CuSeqlensNegativeStart) {
  cu_q_ = {-1, 3, 8, 99};
  expect_forward_error(valid_varlen(), "options.cu_seqlens_q: expected a non-negative first offset, got -1");
}

TEST_F(ApiErrors, CuSeqlensStrided) {
  std::vector<std::int32_t> spaced = {0, -1, 3, -1, 8};
  Call c = valid_varlen();
  c.o.cu_seqlens_q = make_tensor(spaced.data(), DType::i32, {B + 1}, {2});
  expect_forward_error(c, "options.cu_seqlens_q: expected a contiguous tensor (stride 1), got a strided view");
}

TEST_F(ApiErrors, VarlenLseShape) {
  Call c = valid_varlen();
  c.lse = make_tensor(lse_.data(), DType::f32, {1, H, TQ});
  expect_forward_error(c, "lse: expected rank 2, got rank 3 [1, 4, 8]");
  c = valid_varlen();
  c.lse = make_tensor(lse_.data(), DType::f32, {TQ, H});
  expect_forward_error(c, "lse: expected shape [4, 8] ([num_heads, total_q]), got shape [8, 4]");
}

TEST_F(ApiErrors, VarlenMaxSeqlenTooSmall) {
  Call c = valid_varlen();
  c.o.max_seqlen_q = 2;
  expect_forward_error(c, "options.max_seqlen_q: expected >= the longest query sequence 5, got 2");
  c = valid_varlen();
  c.o.max_seqlen_k = 5;
  expect_forward_error(c, "options.max_seqlen_k: expected >= the longest key sequence 6, got 5");
}

}  // namespace
}  // namespace fastattn::testing
