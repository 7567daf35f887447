// merge_states_errors_test.cpp — every argument error of fastattn::merge_states: its code, its
// message word for word (src/inference/merge_validate.cpp) and that nothing was written.
//
// Each test starts from a valid call (checked to run) and breaks one thing; plan_merge_states
// and merge_states must both throw, and every buffer must keep its old bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace fastattn::testing {
namespace {

constexpr std::int64_t B = 2, SQ = 5, H = 4, D = 16, TQ = 10;

struct MergeCall {
  TensorView out_a, lse_a, out_b, lse_b, out, lse;
  bool with_lse = true;
  MergeOptions o;
};

class MergeErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    // Twice the largest view, so broken views of the same buffers stay inside them.
    const std::size_t on = 2 * B * SQ * H * D, ln = 2 * B * H * SQ;
    auto filled = [](std::size_t n, float scale) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = scale * static_cast<float>(std::sin(0.37 * static_cast<double>(i) + 1.0));
      return x;
    };
    a_ = filled(on, 1.0f);
    b_ = filled(on, 2.0f);
    la_ = filled(ln, 3.0f);
    lb_ = filled(ln, 1.5f);
    out_.assign(on, 123.0f);
    lse_.assign(ln, 123.0f);
  }

  MergeCall valid() {
    MergeCall c;
    c.out_a = make_tensor(a_.data(), DType::f32, {B, SQ, H, D});
    c.lse_a = make_tensor(la_.data(), DType::f32, {B, H, SQ});
    c.out_b = make_tensor(b_.data(), DType::f32, {B, SQ, H, D});
    c.lse_b = make_tensor(lb_.data(), DType::f32, {B, H, SQ});
    c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D});
    c.lse = make_tensor(lse_.data(), DType::f32, {B, H, SQ});
    return c;
  }
  MergeCall valid_varlen() {
    MergeCall c = valid();
    c.out_a = make_tensor(a_.data(), DType::f32, {TQ, H, D});
    c.out_b = make_tensor(b_.data(), DType::f32, {TQ, H, D});
    c.out = make_tensor(out_.data(), DType::f32, {TQ, H, D});
    c.lse_a = make_tensor(la_.data(), DType::f32, {H, TQ});
    c.lse_b = make_tensor(lb_.data(), DType::f32, {H, TQ});
    c.lse = make_tensor(lse_.data(), DType::f32, {H, TQ});
    return c;
  }

  std::vector<std::vector<float>> snapshot() const { return {a_, b_, la_, lb_, out_, lse_}; }

  static std::optional<TensorView> lse_of(const MergeCall& c) { return c.with_lse ? std::optional<TensorView>(c.lse) : std::nullopt; }

  // Both entry points throw `code` with exactly `message`; no buffer changes.
  void expect_refused(const MergeCall& c, ErrorCode code, const std::string& message) {
    const auto before = snapshot();
    const std::function<void()> calls[] = {
        [&] { plan_merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, c.out, lse_of(c), c.o); },
        [&] { merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, c.out, lse_of(c), c.o); },
    };
    for (const auto& call : calls) {
      try {
        call();
        ADD_FAILURE() << "expected fastattn::Error \"" << message << "\", nothing thrown";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_EQ(std::string(e.what()), message);
      }
    }
    EXPECT_TRUE(snapshot() == before) << "a refused call wrote to a buffer";
  }

  std::vector<float> a_, b_, la_, lb_, out_, lse_;
};

TEST_F(MergeErrors, ValidCallsRun) {
  for (MergeCall c : {valid(), valid_varlen()}) {
    EXPECT_NO_THROW(merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, c.out, c.lse, c.o));
  }
  MergeCall c = valid();
  EXPECT_NO_THROW(merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, c.out_a, c.lse_a)) << "in place into A";
  EXPECT_NO_THROW(merge_states(c.out_a, c.lse_a, c.out_b, c.lse_b, c.out_b, c.lse_b)) << "in place into B";
}

TEST_F(MergeErrors, OutA) {
  MergeCall c = valid();
  c.out_a = make_tensor(a_.data(), DType::f32, {10, 64});
  expect_refused(c, ErrorCode::invalid_argument,
                 "out_a: expected rank 4 [batch, seqlen_q, num_heads, head_dim] or rank 3 [total_q, num_heads, "
                 "head_dim] (varlen), got rank 2 [10, 64]");
  c = valid();
  c.out_a.dtype = DType::i32;
  expect_refused(c, ErrorCode::invalid_argument, "out_a: expected dtype f32, f16 or bf16, got dtype i32");
  c = valid();
  c.out_a = make_tensor(a_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D * 2, H * D * 2, D * 2, 2});
  expect_refused(c, ErrorCode::invalid_argument, "out_a: expected a contiguous head_dim (stride[3] = 1), got stride 2");
  c = valid();
  c.out_a = make_tensor(a_.data(), DType::f32, {B, SQ, H, 0});
  expect_refused(c, ErrorCode::invalid_argument, "out_a: expected head_dim (shape[3]) >= 1, got 0");
  c = valid();
  c.out_a.data = nullptr;
  expect_refused(c, ErrorCode::invalid_argument, "out_a: expected a non-null data pointer, got nullptr");
}

TEST_F(MergeErrors, OutBAndOutMustMatchOutA) {
  MergeCall c = valid();
  c.out_b.dtype = DType::f16;
  expect_refused(c, ErrorCode::invalid_argument, "out_b: expected dtype f32 (as out_a), got dtype f16");
  c = valid();
  c.out_b = make_tensor(b_.data(), DType::f32, {B, SQ, H, 8});
  expect_refused(c, ErrorCode::invalid_argument, "out_b: expected shape [2, 5, 4, 16] (as out_a), got shape [2, 5, 4, 8]");
  c = valid();
  c.out_b = make_tensor(b_.data(), DType::f32, {B * SQ, H, D});
  expect_refused(c, ErrorCode::invalid_argument, "out_b: expected rank 4 (as out_a), got rank 3 [10, 4, 16]");
  c = valid();
  c.out_b.device = Device::cuda(0);
  expect_refused(c, ErrorCode::invalid_argument, "out_b: expected device cpu (the device of out_a), got device cuda:0");
  c = valid();
  c.out.dtype = DType::bf16;
  expect_refused(c, ErrorCode::invalid_argument, "out: expected dtype f32 (as out_a), got dtype bf16");
  c = valid();
  c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D, 0, D, 1});
  expect_refused(c, ErrorCode::invalid_argument, "out: expected non-zero strides on an output, got stride[1] = 0");
  c = valid();
  c.out = make_tensor(out_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D, H * D, 8, 1});
  expect_refused(c, ErrorCode::invalid_argument,
                 "out: expected an output view whose elements do not overlap (stride[2] > 15), got strides 320, 64, 8, 1");
}

TEST_F(MergeErrors, LseTensors) {
  MergeCall c = valid();
  c.lse_a.dtype = DType::f16;
  expect_refused(c, ErrorCode::invalid_argument, "lse_a: expected dtype f32, got dtype f16");
  c = valid();
  c.lse_b = make_tensor(lb_.data(), DType::f32, {B, SQ, H});
  expect_refused(c, ErrorCode::invalid_argument,
                 "lse_b: expected shape [2, 4, 5] ([batch, num_heads, seqlen_q] of out_a [2, 5, 4, 16]), got shape [2, 5, 4]");
  c = valid();
  c.lse = make_tensor(lse_.data(), DType::f32, {B * H, SQ});
  expect_refused(c, ErrorCode::invalid_argument, "lse: expected rank 3 [batch, num_heads, seqlen_q], got rank 2 [8, 5]");
  c = valid();
  c.lse_a.device = Device::cuda(1);
  expect_refused(c, ErrorCode::invalid_argument, "lse_a: expected device cpu (the device of out_a), got device cuda:1");
  c = valid_varlen();
  c.lse_a = make_tensor(la_.data(), DType::f32, {TQ, H});
  expect_refused(c, ErrorCode::invalid_argument,
                 "lse_a: expected shape [4, 10] ([num_heads, total_q] of out_a [10, 4, 16]), got shape [10, 4]");
}

TEST_F(MergeErrors, OverlapsOtherThanExactInPlace) {
  MergeCall c = valid();
  c.out = make_tensor(b_.data() + D, DType::f32, {B, SQ, H, D});  // shifted by one head row
  expect_refused(c, ErrorCode::invalid_argument,
                 "out: expected memory that does not overlap out_b (or exactly the view out_b, for an in-place "
                 "merge), got an overlapping range");
  c = valid();
  c.out = make_tensor(a_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D, H * D, D, 1});
  c.out_a = make_tensor(a_.data(), DType::f32, {B, SQ, H, D}, {SQ * H * D * 2, H * D * 2, D * 2, 1});
  expect_refused(c, ErrorCode::invalid_argument,
                 "out: expected memory that does not overlap out_a (or exactly the view out_a, for an in-place "
                 "merge), got an overlapping range");
  c = valid();
  c.lse = make_tensor(out_.data(), DType::f32, {B, H, SQ});
  expect_refused(c, ErrorCode::invalid_argument, "lse: expected memory that does not overlap out, got an overlapping range");
  c = valid();
  c.lse = make_tensor(la_.data() + 1, DType::f32, {B, H, SQ});
  expect_refused(c, ErrorCode::invalid_argument,
                 "lse: expected memory that does not overlap lse_a (or exactly the view lse_a, for an in-place "
                 "merge), got an overlapping range");
  c = valid();
  c.out = make_tensor(la_.data(), DType::f32, {1, 1, 1, D});
  c.out_a = make_tensor(a_.data(), DType::f32, {1, 1, 1, D});
  c.out_b = make_tensor(b_.data(), DType::f32, {1, 1, 1, D});
  c.lse_a = make_tensor(la_.data(), DType::f32, {1, 1, 1});
  c.lse_b = make_tensor(lb_.data(), DType::f32, {1, 1, 1});
  c.lse = make_tensor(lse_.data(), DType::f32, {1, 1, 1});
  expect_refused(c, ErrorCode::invalid_argument, "out: expected memory that does not overlap lse_a, got an overlapping range");
}

TEST_F(MergeErrors, Options) {
  MergeCall c = valid();
  c.o.num_threads = -1;
  expect_refused(c, ErrorCode::invalid_argument, "options.num_threads: expected >= 0 (0: default), got -1");
  c = valid();
  c.o.backend = Backend::cuda;
  expect_refused(c, ErrorCode::invalid_argument,
                 "options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda");
}

TEST_F(MergeErrors, CudaTensorsWithoutCudaBuild) {
  if (build_info().cuda_compiled) GTEST_SKIP() << "a CUDA build accepts CUDA tensors";
  MergeCall c = valid();
  for (TensorView* t : {&c.out_a, &c.lse_a, &c.out_b, &c.lse_b, &c.out, &c.lse}) t->device = Device::cuda(0);
  expect_refused(c, ErrorCode::unsupported, "out_a: expected a cpu tensor (fastattn was built without CUDA), got device cuda:0");
}

}  // namespace
}  // namespace fastattn::testing
