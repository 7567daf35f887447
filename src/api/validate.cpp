// validate.cpp — every check on a caller's arguments, in one place.
//
// Messages follow one pattern, "<argument>: expected <what>, got <actual>", so a user can fix
// the call without reading the source. Nothing is written before validation completes.
#include "api/validate.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
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

constexpr std::int64_t kMaxIndex32 = std::numeric_limits<std::int32_t>::max();

// Structural checks shared by every tensor argument.
void check_view(const TensorView& t, const std::string& name, int rank) {
  if (t.rank != rank) fail(name, "rank " + std::to_string(rank), "rank " + std::to_string(t.rank) + " " + t.shape_string());
  check_view_layout(t, name);
}

void check_dtype(const TensorView& t, const std::string& name, DType expected) {
  if (t.dtype != expected) fail(name, std::string("dtype ") + to_string(expected), std::string("dtype ") + to_string(t.dtype));
}

void check_device(const TensorView& t, const std::string& name, const Device& expected) {
  if (t.device != expected) {
    fail(name, "device " + to_string(expected) + " (the device of q)", "device " + to_string(t.device));
  }
}

void check_shape(const TensorView& t, const std::string& name, const std::vector<std::int64_t>& shape,
                 const std::string& like) {
  bool same = t.rank == static_cast<int>(shape.size());
  for (int d = 0; same && d < t.rank; ++d) same = t.shape[d] == shape[static_cast<std::size_t>(d)];
  if (!same) {
    TensorView e;
    e.rank = static_cast<int>(shape.size());
    for (int d = 0; d < e.rank; ++d) e.shape[d] = shape[static_cast<std::size_t>(d)];
    fail(name, "shape " + e.shape_string() + " (" + like + ")", "shape " + t.shape_string());
  }
}

// Outputs must not share memory with anything else in the call.
void check_no_overlap(const TensorView& out, const std::string& out_name, const TensorView& other,
                      const std::string& other_name) {
  const ByteSpan a = byte_span(out), b = byte_span(other);
  if (a.begin == a.end || b.begin == b.end) return;
  if (a.begin < b.end && b.begin < a.end) {
    fail(out_name, "memory that does not overlap " + other_name, "an overlapping range");
  }
}

// Output views must not write one element twice. Sufficient test: ordered by stride, each
// dimension's stride exceeds the extent spanned by all smaller-stride dimensions together.
void check_writable(const TensorView& t, const std::string& name) {
  if (t.numel() == 0) return;  // empty views write nothing (their strides may be 0)
  int dims[TensorView::kMaxRank];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.stride[d] == 0) fail(name, "non-zero strides on an output", "stride[" + std::to_string(d) + "] = 0");
    dims[n++] = d;
  }
  for (int i = 1; i < n; ++i)  // insertion sort by stride
    for (int j = i; j > 0 && t.stride[dims[j]] < t.stride[dims[j - 1]]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t span = 0;  // largest offset reachable by the smaller-stride dimensions
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.stride[d] <= span) {
      fail(name, "an output view whose elements do not overlap (stride[" + std::to_string(d) +
                     "] > " + str(span) + ")",
           "strides " + [&] {
             std::string s;
             for (int k = 0; k < t.rank; ++k) s += (k ? ", " : "") + str(t.stride[k]);
             return s;
           }());
    }
    span += (t.shape[d] - 1) * t.stride[d];
  }
}

// Outputs must not overwrite the varlen offsets they are computed from.
void check_no_overlap_offsets(const TensorView& out, const std::string& out_name,
                              const AttentionOptions& o) {
  if (o.cu_seqlens_q) check_no_overlap(out, out_name, *o.cu_seqlens_q, "options.cu_seqlens_q");
  if (o.cu_seqlens_k) check_no_overlap(out, out_name, *o.cu_seqlens_k, "options.cu_seqlens_k");
}

TokenStrides token_strides(const TensorView& t, bool varlen) {
  TokenStrides s;
  if (varlen) {
    s.token = t.stride[0];
    s.head = t.stride[1];
  } else {
    s.batch = t.stride[0];
    s.token = t.stride[1];
    s.head = t.stride[2];
  }
  return s;
}

void check_cu_seqlens(const TensorView& cu, const std::string& name, std::int64_t batch,
                      std::int64_t total, const std::string& total_name, const Device& device,
                      std::int64_t* max_len) {
  check_view(cu, name, 1);
  check_dtype(cu, name, DType::i32);
  check_device(cu, name, device);
  if (cu.shape[0] != batch + 1) {
    fail(name, "shape [" + str(batch + 1) + "] (batch + 1)", "shape " + cu.shape_string());
  }
  if (cu.shape[0] < 1) fail(name, "at least one element", "shape " + cu.shape_string());
  if (device.type != DeviceType::cpu) return;  // device offsets are not read on the host
  const auto* v = static_cast<const std::int32_t*>(cu.data);
  const std::int64_t s = cu.stride[0];
  if (v[0] < 0) fail(name, "a non-negative first offset", str(v[0]));
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t lo = v[b * s], hi = v[(b + 1) * s];
    if (hi < lo) {
      fail(name, "non-decreasing offsets", name + "[" + str(b + 1) + "] = " + str(hi) + " < " +
                                               name + "[" + str(b) + "] = " + str(lo));
    }
    if (hi - lo > longest) longest = hi - lo;
  }
  if (v[batch * s] > total) {
    fail(name, "last offset <= " + total_name + " = " + str(total), str(v[batch * s]));
  }
  *max_len = longest;
}

struct Core {
  AttentionProblem p;
  bool varlen = false;
};

// Checks q, k, v, lse-shape facts and options; fills everything but the output operands.
Core validate_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                     const AttentionOptions& o) {
  Core c;
  AttentionProblem& p = c.p;
  const bool has_cu_q = o.cu_seqlens_q.has_value(), has_cu_k = o.cu_seqlens_k.has_value();
  if (has_cu_q != has_cu_k) {
    fail("options.cu_seqlens_k", has_cu_q ? "a tensor, since cu_seqlens_q is given" : "none, since cu_seqlens_q is not given",
         has_cu_k ? "a tensor" : "none");
  }
  c.varlen = has_cu_q;
  const int rank = c.varlen ? 3 : 4;
  const std::string layout = c.varlen ? "[total, heads, head_dim] (varlen)" : "[batch, seqlen, heads, head_dim]";
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (t->rank != rank) {
      fail(name, "rank " + std::to_string(rank) + " " + layout, "rank " + std::to_string(t->rank) + " " + t->shape_string());
    }
    check_view(*t, name, rank);
  }
  if (q.dtype != DType::f32 && q.dtype != DType::f16 && q.dtype != DType::bf16) {
    fail("q", "dtype f32, f16 or bf16", std::string("dtype ") + to_string(q.dtype));
  }
  check_dtype(k, "k", q.dtype);
  check_dtype(v, "v", q.dtype);
  check_device(k, "k", q.device);
  check_device(v, "v", q.device);
  if (q.device.type == DeviceType::cuda && !FASTATTN_HAVE_CUDA) {
    throw Error(ErrorCode::unsupported, "q: expected a cpu tensor (fastattn was built without CUDA), got device " + to_string(q.device));
  }

  const int h = rank - 2, d = rank - 1;  // dims of heads and head_dim
  p.dtype = q.dtype;
  p.device = q.device;
  p.head_dim = q.shape[d];
  p.num_heads = q.shape[h];
  p.num_kv_heads = k.shape[h];
  if (p.head_dim % 8 != 0 || p.head_dim < 8 || p.head_dim > kMaxHeadDim) {
    fail("q", "head_dim (shape[" + std::to_string(d) + "]) a multiple of 8 in [8, " + str(kMaxHeadDim) + "]", str(p.head_dim));
  }
  if (k.shape[d] != p.head_dim) fail("k", "head_dim shape[" + std::to_string(d) + "] = " + str(p.head_dim) + " (as q)", str(k.shape[d]));
  if (v.shape[d] != p.head_dim) fail("v", "head_dim shape[" + std::to_string(d) + "] = " + str(p.head_dim) + " (as q)", str(v.shape[d]));
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (t->stride[d] != 1) fail(name, "a contiguous head_dim (stride[" + std::to_string(d) + "] = 1)", "stride " + str(t->stride[d]));
  }
  if (p.num_kv_heads < 1) fail("k", "at least one KV head (shape[" + std::to_string(h) + "])", str(p.num_kv_heads));
  if (p.num_heads < 1) fail("q", "at least one head (shape[" + std::to_string(h) + "])", str(p.num_heads));
  if (p.num_heads % p.num_kv_heads != 0) {
    fail("k", "num_kv_heads (shape[" + std::to_string(h) + "]) dividing q's num_heads = " + str(p.num_heads), str(p.num_kv_heads));
  }
  if (v.shape[h] != p.num_kv_heads) fail("v", "num_kv_heads shape[" + std::to_string(h) + "] = " + str(p.num_kv_heads) + " (as k)", str(v.shape[h]));
  if (v.shape[0] != k.shape[0] || (!c.varlen && v.shape[1] != k.shape[1])) {
    fail("v", "the batch and sequence sizes of k " + k.shape_string(), v.shape_string());
  }
  if (p.num_heads > kMaxIndex32) fail("q", "num_heads <= 2^31 - 1", str(p.num_heads));

  if (c.varlen) {
    p.total_q = q.shape[0];
    p.total_k = k.shape[0];
    check_view(*o.cu_seqlens_q, "options.cu_seqlens_q", 1);
    if (o.cu_seqlens_q->shape[0] < 1) fail("options.cu_seqlens_q", "at least one element [batch + 1]", "shape " + o.cu_seqlens_q->shape_string());
    p.batch = o.cu_seqlens_q->shape[0] - 1;
    std::int64_t max_q = 0, max_k = 0;
    check_cu_seqlens(*o.cu_seqlens_q, "options.cu_seqlens_q", p.batch, p.total_q, "q.shape[0]", q.device, &max_q);
    check_cu_seqlens(*o.cu_seqlens_k, "options.cu_seqlens_k", p.batch, p.total_k, "k.shape[0]", q.device, &max_k);
    if (q.device.type == DeviceType::cpu) {
      p.seqlen_q = max_q;
      p.seqlen_k = max_k;
      if (o.max_seqlen_q != 0 && o.max_seqlen_q < max_q) fail("options.max_seqlen_q", ">= the longest query sequence " + str(max_q), str(o.max_seqlen_q));
      if (o.max_seqlen_k != 0 && o.max_seqlen_k < max_k) fail("options.max_seqlen_k", ">= the longest key sequence " + str(max_k), str(o.max_seqlen_k));
    } else {
      if (o.max_seqlen_q <= 0) fail("options.max_seqlen_q", "> 0 for varlen CUDA tensors", str(o.max_seqlen_q));
      if (o.max_seqlen_k <= 0) fail("options.max_seqlen_k", "> 0 for varlen CUDA tensors", str(o.max_seqlen_k));
      p.seqlen_q = o.max_seqlen_q;
      p.seqlen_k = o.max_seqlen_k;
    }
    p.cu_seqlens_q = static_cast<const std::int32_t*>(o.cu_seqlens_q->data);
    p.cu_seqlens_k = static_cast<const std::int32_t*>(o.cu_seqlens_k->data);
    if (o.cu_seqlens_q->stride[0] != 1 || o.cu_seqlens_k->stride[0] != 1) {
      fail(o.cu_seqlens_q->stride[0] != 1 ? "options.cu_seqlens_q" : "options.cu_seqlens_k", "a contiguous tensor (stride 1)", "a strided view");
    }
  } else {
    p.batch = q.shape[0];
    p.seqlen_q = q.shape[1];
    p.seqlen_k = k.shape[1];
    if (k.shape[0] != p.batch) fail("k", "batch shape[0] = " + str(p.batch) + " (as q)", str(k.shape[0]));
    p.total_q = p.batch * p.seqlen_q;
    p.total_k = p.batch * p.seqlen_k;
  }
  if (p.seqlen_q > kMaxIndex32 || p.total_q > kMaxIndex32) fail("q", "at most 2^31 - 1 query tokens", str(p.total_q));
  if (p.seqlen_k > kMaxIndex32 || p.total_k > kMaxIndex32) fail("k", "at most 2^31 - 1 key tokens", str(p.total_k));

  p.q = {q.data, token_strides(q, c.varlen)};
  p.k = {k.data, token_strides(k, c.varlen)};
  p.v = {v.data, token_strides(v, c.varlen)};

  // Options.
  const float scale = o.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(p.head_dim)));
  if (!std::isfinite(scale) || scale == 0.0f) fail("options.softmax_scale", "a finite non-zero value", std::to_string(scale));
  p.softmax_scale = scale;
  if (!std::isfinite(o.softcap) || o.softcap < 0.0f) fail("options.softcap", "0 (off) or a finite positive value", std::to_string(o.softcap));
  p.softcap = o.softcap;
  if (o.window_left < -1) fail("options.window_left", ">= -1 (-1: unbounded)", str(o.window_left));
  if (o.window_right < -1) fail("options.window_right", ">= -1 (-1: unbounded)", str(o.window_right));
  if (o.causal && o.window_right > 0) fail("options.window_right", "-1 or 0 with causal", str(o.window_right));
  p.window_left = o.window_left;
  p.window_right = o.causal ? 0 : o.window_right;
  p.alignment = o.alignment;
  if (o.num_threads < 0) fail("options.num_threads", ">= 0 (0: default)", std::to_string(o.num_threads));
  p.num_threads = o.num_threads;
  p.deterministic = o.deterministic;
  p.cuda_stream = o.cuda_stream;
  p.workspace = o.workspace;
  if (o.workspace && o.workspace->size > 0 && o.workspace->data == nullptr) {
    fail("options.workspace", "a non-null data pointer when size > 0", "nullptr");
  }
  return c;
}

std::vector<std::int64_t> shape_of(const TensorView& t) {
  return std::vector<std::int64_t>(t.shape, t.shape + t.rank);
}

std::vector<std::int64_t> lse_shape(const AttentionProblem& p, bool varlen) {
  if (varlen) return {p.num_heads, p.total_q};
  return {p.batch, p.num_heads, p.seqlen_q};
}

void set_lse(AttentionProblem& p, const TensorView& lse, bool varlen) {
  check_view(lse, "lse", varlen ? 2 : 3);
  check_dtype(lse, "lse", DType::f32);
  check_device(lse, "lse", p.device);
  check_shape(lse, "lse", lse_shape(p, varlen), varlen ? "[num_heads, total_q]" : "[batch, num_heads, seqlen_q]");
  p.lse = static_cast<float*>(lse.data);
  if (varlen) {
    p.lse_head_stride = lse.stride[0];
    p.lse_token_stride = lse.stride[1];
  } else {
    p.lse_batch_stride = lse.stride[0];
    p.lse_head_stride = lse.stride[1];
    p.lse_token_stride = lse.stride[2];
  }
}

void check_like(const TensorView& t, const std::string& name, const TensorView& model,
                const std::string& model_name, const AttentionProblem& p, int rank) {
  check_view(t, name, rank);
  check_dtype(t, name, p.dtype);
  check_device(t, name, p.device);
  check_shape(t, name, shape_of(model), "as " + model_name);
  if (t.stride[rank - 1] != 1) fail(name, "a contiguous head_dim (stride[" + std::to_string(rank - 1) + "] = 1)", "stride " + str(t.stride[rank - 1]));
}

}  // namespace

AttentionProblem validate_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const std::optional<TensorView>& lse,
                                  const AttentionOptions& options) {
  Core c = validate_inputs(q, k, v, options);
  AttentionProblem& p = c.p;
  const int rank = c.varlen ? 3 : 4;
  check_like(out, "out", q, "q", p, rank);
  check_writable(out, "out");
  p.out = {out.data, token_strides(out, c.varlen)};
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) check_no_overlap(out, "out", *t, name);
  check_no_overlap_offsets(out, "out", options);
  if (lse) {
    set_lse(p, *lse, c.varlen);
    check_writable(*lse, "lse");
    for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) check_no_overlap(*lse, "lse", *t, name);
    check_no_overlap_offsets(*lse, "lse", options);
  }
  return p;
}

AttentionProblem validate_backward(const TensorView& dout, const TensorView& q,
                                   const TensorView& k, const TensorView& v, const TensorView& out,
                                   const TensorView& lse, const TensorView& dq,
                                   const TensorView& dk, const TensorView& dv,
                                   const AttentionOptions& options) {
  Core c = validate_inputs(q, k, v, options);
  AttentionProblem& p = c.p;
  const int rank = c.varlen ? 3 : 4;
  check_like(out, "out", q, "q", p, rank);
  check_like(dout, "dout", q, "q", p, rank);
  check_like(dq, "dq", q, "q", p, rank);
  check_like(dk, "dk", k, "k", p, rank);
  check_like(dv, "dv", v, "v", p, rank);
  set_lse(p, lse, c.varlen);
  p.out = {out.data, token_strides(out, c.varlen)};
  p.dout = {dout.data, token_strides(dout, c.varlen)};
  p.dq = {dq.data, token_strides(dq, c.varlen)};
  p.dk = {dk.data, token_strides(dk, c.varlen)};
  p.dv = {dv.data, token_strides(dv, c.varlen)};
  const std::pair<const TensorView*, const char*> outputs[] = {{&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}};
  const std::pair<const TensorView*, const char*> inputs[] = {
      {&dout, "dout"}, {&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&lse, "lse"}};
  for (std::size_t i = 0; i < 3; ++i) {
    check_writable(*outputs[i].first, outputs[i].second);
    for (const auto& in : inputs) check_no_overlap(*outputs[i].first, outputs[i].second, *in.first, in.second);
    check_no_overlap_offsets(*outputs[i].first, outputs[i].second, options);
    for (std::size_t j = i + 1; j < 3; ++j) {
      check_no_overlap(*outputs[i].first, outputs[i].second, *outputs[j].first, outputs[j].second);
    }
  }
  return p;
}

}  // namespace fastattn
