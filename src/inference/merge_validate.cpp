// merge_validate.cpp — every check on a merge_states call, in one place.
//
// The structural view checks are the attention calls' own (src/api/view_checks.hpp), so a
// caller reads one style of message.
#include "inference/merge_validate.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "api/view_checks.hpp"
#include "fastattn/error.hpp"

namespace fastattn {
namespace {

[[noreturn]] void fail(const std::string& arg, const std::string& expected, const std::string& actual) {
  fail_argument(arg, expected, actual);
}

std::string str(std::int64_t x) { return std::to_string(x); }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  TensorView t;
  t.rank = static_cast<int>(shape.size());
  for (int d = 0; d < t.rank; ++d) t.shape[d] = shape[static_cast<std::size_t>(d)];
  return t.shape_string();
}


bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.stride[d] != b.stride[d])) return false;
  }
  return true;
}

bool overlaps(const TensorView& a, const TensorView& b) {
  const ByteSpan x = byte_span(a), y = byte_span(b);
  return x.begin != x.end && y.begin != y.end && x.begin < y.end && y.begin < x.end;
}

// An output may be exactly an input of its kind (in-place merge: each element is read before
// it is written, by the same thread) but must not partly overlap anything it reads.
void check_output_memory(const TensorView& output, const std::string& output_name, const TensorView& input,
                         const std::string& input_name, bool may_alias) {
  if (may_alias && same_view(output, input)) return;
  if (!overlaps(output, input)) return;
  fail(output_name, "memory that does not overlap " + input_name +
                        (may_alias ? " (or exactly the view " + input_name + ", for an in-place merge)" : ""),
       "an overlapping range");
}

// Output views must not write one element twice (src/api/validate.cpp: check_writable).
void check_writable(const TensorView& t, const std::string& name) {
  if (t.numel() == 0) return;
  int dims[TensorView::kMaxRank];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.stride[d] == 0) fail(name, "non-zero strides on an output", "stride[" + std::to_string(d) + "] = 0");
    dims[n++] = d;
  }
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && t.stride[dims[j]] < t.stride[dims[j - 1]]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t span = 0;
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.stride[d] <= span) {
      std::string strides;
      for (int k = 0; k < t.rank; ++k) strides += (k ? ", " : "") + str(t.stride[k]);
      fail(name, "an output view whose elements do not overlap (stride[" + std::to_string(d) + "] > " + str(span) + ")",
           "strides " + strides);
    }
    span += (t.shape[d] - 1) * t.stride[d];
  }
}

// out_b and out: out_a's rank, dtype, device and shape, head_dim contiguous.
void check_out_like(const TensorView& t, const std::string& name, const TensorView& out_a) {
  if (t.rank != out_a.rank) fail(name, "rank " + std::to_string(out_a.rank) + " (as out_a)", "rank " + std::to_string(t.rank) + " " + t.shape_string());
  check_view_layout(t, name);
  if (t.dtype != out_a.dtype) fail(name, std::string("dtype ") + to_string(out_a.dtype) + " (as out_a)", std::string("dtype ") + to_string(t.dtype));
  if (t.device != out_a.device) fail(name, "device " + to_string(out_a.device) + " (the device of out_a)", "device " + to_string(t.device));
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] != out_a.shape[d]) fail(name, "shape " + out_a.shape_string() + " (as out_a)", "shape " + t.shape_string());
  }
  const int last = t.rank - 1;
  if (t.stride[last] != 1) fail(name, "a contiguous head_dim (stride[" + std::to_string(last) + "] = 1)", "stride " + str(t.stride[last]));
}

// lse_a, lse_b, lse: f32 of the shape out_a implies.
LseOperand check_lse(const TensorView& t, const std::string& name, const TensorView& out_a,
                     const std::vector<std::int64_t>& shape, bool varlen) {
  const std::string layout = varlen ? "[num_heads, total_q]" : "[batch, num_heads, seqlen_q]";
  if (t.rank != static_cast<int>(shape.size())) {
    fail(name, "rank " + std::to_string(shape.size()) + " " + layout, "rank " + std::to_string(t.rank) + " " + t.shape_string());
  }
  check_view_layout(t, name);
  if (t.dtype != DType::f32) fail(name, "dtype f32", std::string("dtype ") + to_string(t.dtype));
  if (t.device != out_a.device) fail(name, "device " + to_string(out_a.device) + " (the device of out_a)", "device " + to_string(t.device));
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] != shape[static_cast<std::size_t>(d)]) {
      fail(name, "shape " + shape_text(shape) + " (" + layout + " of out_a " + out_a.shape_string() + ")", "shape " + t.shape_string());
    }
  }
  LseOperand op;
  op.data = static_cast<float*>(t.data);
  if (varlen) {
    op.stride = {0, t.stride[0], t.stride[1]};
  } else {
    op.stride = {t.stride[0], t.stride[1], t.stride[2]};
  }
  return op;
}

Operand operand(const TensorView& t, bool varlen) {
  Operand op;
  op.data = t.data;
  if (varlen) {
    op.stride = {0, t.stride[0], t.stride[1]};
  } else {
    op.stride = {t.stride[0], t.stride[1], t.stride[2]};
  }
  return op;
}

}  // namespace

MergeProblem validate_merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                            const TensorView& lse_b, const TensorView& out,
                            const std::optional<TensorView>& lse, const MergeOptions& options) {
  if (out_a.rank != 4 && out_a.rank != 3) {
    fail("out_a", "rank 4 [batch, seqlen_q, num_heads, head_dim] or rank 3 [total_q, num_heads, head_dim] (varlen)",
         "rank " + std::to_string(out_a.rank) + " " + out_a.shape_string());
  }
  check_view_layout(out_a, "out_a");
  if (out_a.dtype != DType::f32 && out_a.dtype != DType::f16 && out_a.dtype != DType::bf16) {
    fail("out_a", "dtype f32, f16 or bf16", std::string("dtype ") + to_string(out_a.dtype));
  }
  const bool varlen = out_a.rank == 3;
  const int last = out_a.rank - 1;
  if (out_a.shape[last] < 1) fail("out_a", "head_dim (shape[" + std::to_string(last) + "]) >= 1", str(out_a.shape[last]));
  if (out_a.stride[last] != 1) fail("out_a", "a contiguous head_dim (stride[" + std::to_string(last) + "] = 1)", "stride " + str(out_a.stride[last]));
  if (out_a.device.type == DeviceType::cuda && !FASTATTN_HAVE_CUDA) {
    throw Error(ErrorCode::unsupported, "out_a: expected a cpu tensor (fastattn was built without CUDA), got device " + to_string(out_a.device));
  }

  MergeProblem p;
  p.dtype = out_a.dtype;
  p.device = out_a.device;
  p.batch = varlen ? 1 : out_a.shape[0];
  p.seqlen_q = varlen ? out_a.shape[0] : out_a.shape[1];
  p.num_heads = out_a.shape[last - 1];
  p.head_dim = out_a.shape[last];
  const std::vector<std::int64_t> lse_shape =
      varlen ? std::vector<std::int64_t>{p.num_heads, p.seqlen_q} : std::vector<std::int64_t>{p.batch, p.num_heads, p.seqlen_q};

  // In argument order, so the first bad argument is the one named.
  p.lse_a = check_lse(lse_a, "lse_a", out_a, lse_shape, varlen);
  check_out_like(out_b, "out_b", out_a);
  p.lse_b = check_lse(lse_b, "lse_b", out_a, lse_shape, varlen);
  check_out_like(out, "out", out_a);
  check_writable(out, "out");
  if (lse) {
    p.lse = check_lse(*lse, "lse", out_a, lse_shape, varlen);
    check_writable(*lse, "lse");
  }
  if (options.num_threads < 0) fail("options.num_threads", ">= 0 (0: default)", std::to_string(options.num_threads));

  check_output_memory(out, "out", out_a, "out_a", true);
  check_output_memory(out, "out", out_b, "out_b", true);
  check_output_memory(out, "out", lse_a, "lse_a", false);
  check_output_memory(out, "out", lse_b, "lse_b", false);
  if (lse) {
    check_output_memory(*lse, "lse", lse_a, "lse_a", true);
    check_output_memory(*lse, "lse", lse_b, "lse_b", true);
    check_output_memory(*lse, "lse", out_a, "out_a", false);
    check_output_memory(*lse, "lse", out_b, "out_b", false);
    check_output_memory(*lse, "lse", out, "out", false);
  }

  p.out_a = operand(out_a, varlen);
  p.out_b = operand(out_b, varlen);
  p.out = operand(out, varlen);
  p.num_threads = options.num_threads;
  p.cuda_stream = options.cuda_stream;
  return p;
}

}  // namespace fastattn
