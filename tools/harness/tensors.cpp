// tensors.cpp — HostTensor (guarded strided memory) and CaseData (the tensors of a Case).
#include "harness/tensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.hpp"
#include "harness/device_mirror.hpp"
#include "harness/random.hpp"

namespace fastattn::harness {

std::uint32_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x7e5au;   // quiet NaN, payload 0x25a
    case DType::bf16: return 0x7fdau;  // quiet NaN, payload 0x5a
    default: return 0x7fc0deadu;       // quiet NaN, payload 0xdead
  }
}

std::uint32_t guard_bits(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x7e77u;
    case DType::bf16: return 0x7fe7u;
    default: return 0x7fc0beefu;
  }
}


namespace {

std::vector<std::int64_t> row_major_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t stride = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    s[d] = stride;
    stride *= shape[d];
  }
  return s;
}

void write_bits(void* base, DType dtype, std::int64_t index, std::uint32_t pattern) {
  if (dtype_size(dtype) == 2) {
    static_cast<std::uint16_t*>(base)[index] = static_cast<std::uint16_t>(pattern);
  } else {
    std::memcpy(static_cast<std::uint8_t*>(base) + index * 4, &pattern, 4);
  }
}

}  // namespace

HostTensor::HostTensor(DType dtype, const std::vector<std::int64_t>& shape) {
  view_.dtype = dtype;
  allocate(shape, row_major_strides(shape), 0, 0, 64);
}

HostTensor::HostTensor(DType dtype, const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& strides, std::int64_t lead,
                       std::int64_t tail) {
  view_.dtype = dtype;
  allocate(shape, strides, lead, tail, 64);
}

void HostTensor::allocate(const std::vector<std::int64_t>& shape,
                          const std::vector<std::int64_t>& strides, std::int64_t lead,
                          std::int64_t tail, std::size_t alignment) {
  const int rank = static_cast<int>(shape.size());
  view_.rank = rank;
  std::int64_t numel = 1, extent = 0;
  for (int d = 0; d < rank; ++d) {
    view_.shape[d] = shape[static_cast<std::size_t>(d)];
    view_.stride[d] = strides[static_cast<std::size_t>(d)];
    numel *= view_.shape[d];
    if (view_.shape[d] > 0) extent += (view_.shape[d] - 1) * view_.stride[d];
  }
  if (numel > 0) extent += 1;
  lead_ = lead;
  storage_elems_ = lead + extent + tail;
  const std::size_t esize = dtype_size(view_.dtype);
  // At least one element so that data() is never null (empty views still get a pointer).
  bytes_.assign(static_cast<std::size_t>(std::max<std::int64_t>(storage_elems_, 1)) * esize +
                    alignment,
                0);
  const auto addr = reinterpret_cast<std::uintptr_t>(bytes_.data());
  align_pad_ = (alignment - addr % alignment) % alignment;
  view_.data = start() + lead * static_cast<std::int64_t>(esize);

  offsets_.resize(static_cast<std::size_t>(numel));
  in_view_.assign(static_cast<std::size_t>(storage_elems_), 0);
  std::int64_t index[TensorView::kMaxRank] = {0, 0, 0, 0};
  for (std::int64_t i = 0; i < numel; ++i) {
    std::int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += index[d] * view_.stride[d];
    offsets_[static_cast<std::size_t>(i)] = off;
    in_view_[static_cast<std::size_t>(lead + off)] = 1;
    for (int d = rank - 1; d >= 0; --d) {  // odometer increment
      if (++index[d] < view_.shape[d]) break;
      index[d] = 0;
    }
  }
  for (std::int64_t s = 0; s < storage_elems_; ++s)
    if (!in_view_[static_cast<std::size_t>(s)]) write_bits(start(), view_.dtype, s, guard_bits(view_.dtype));
}

double HostTensor::get(std::int64_t i) const {
  return load_element(view_.data, view_.dtype, offsets_[static_cast<std::size_t>(i)]);
}

void HostTensor::set(std::int64_t i, double value) {
  store_element(view_.data, view_.dtype, offsets_[static_cast<std::size_t>(i)], value);
}

std::uint32_t HostTensor::storage_bits(std::int64_t s) const {
  if (dtype_size(view_.dtype) == 2) {
    std::uint16_t b;
    std::memcpy(&b, start() + s * 2, 2);
    return b;
  }
  std::uint32_t b;
  std::memcpy(&b, start() + s * 4, 4);
  return b;
}

std::uint32_t HostTensor::bits(std::int64_t i) const {
  return storage_bits(lead_ + offsets_[static_cast<std::size_t>(i)]);
}

std::vector<double> HostTensor::values() const {
  std::vector<double> r(offsets_.size());
  for (std::size_t i = 0; i < offsets_.size(); ++i)
    r[i] = load_element(view_.data, view_.dtype, offsets_[i]);
  return r;
}

void HostTensor::fill_view_bits(std::uint32_t pattern) {
  for (std::int64_t off : offsets_) write_bits(view_.data, view_.dtype, off, pattern);
}

std::int64_t HostTensor::count_view_bits(std::uint32_t pattern) const {
  std::int64_t n = 0;
  for (std::int64_t off : offsets_) n += storage_bits(lead_ + off) == pattern;
  return n;
}

std::int64_t HostTensor::count_guard_clobbered() const {
  const std::uint32_t guard = guard_bits(view_.dtype);
  std::int64_t n = 0;
  for (std::int64_t s = 0; s < storage_elems_; ++s)
    if (!in_view_[static_cast<std::size_t>(s)] && storage_bits(s) != guard) ++n;
  return n;
}

std::vector<std::uint8_t> HostTensor::snapshot() const {
  const std::size_t n = static_cast<std::size_t>(storage_elems_) * dtype_size(view_.dtype);
  return std::vector<std::uint8_t>(start(), start() + n);
}

// ---- CaseData ---------------------------------------------------------------------------------

namespace {

// A strided layout for a [batch, seqlen, heads, head_dim] (or varlen [total, heads, head_dim])
// operand: either token-major with padding after every head row, token and batch, or
// head-major ([batch, heads, seqlen, head_dim] storage viewed as BSHD).
HostTensor make_operand(DType dtype, const std::vector<std::int64_t>& shape, bool strided,
                        Random& rng) {
  if (!strided) return HostTensor(dtype, shape);
  const bool varlen = shape.size() == 3;
  const std::int64_t tokens = varlen ? shape[0] : shape[1];
  const std::int64_t heads = shape[shape.size() - 2], dim = shape.back();
  const std::int64_t row_pad = rng.range(1, 9), mid_pad = rng.range(0, 5), seq_pad = rng.range(0, 7);
  std::int64_t token_stride, head_stride, seq_stride;
  if (rng.chance(0.5)) {  // token-major, padded
    head_stride = dim + row_pad;
    token_stride = heads * head_stride + mid_pad;
    seq_stride = tokens * token_stride + seq_pad;
  } else {  // head-major
    token_stride = dim + row_pad;
    head_stride = tokens * token_stride + mid_pad;
    seq_stride = heads * head_stride + seq_pad;
  }
  const std::int64_t lead = rng.range(1, 3);  // base pointer not vector-aligned
  if (varlen) return HostTensor(dtype, shape, {token_stride, head_stride, 1}, lead, 5);
  return HostTensor(dtype, shape, {seq_stride, token_stride, head_stride, 1}, lead, 5);
}

// lse: [batch, heads, seqlen_q] or varlen [heads, total_q], f32; strided: padded rows and
// sometimes a token stride of 2.
HostTensor make_lse(const std::vector<std::int64_t>& shape, bool strided, Random& rng) {
  if (!strided) return HostTensor(DType::f32, shape);
  const std::int64_t token_stride = rng.range(1, 2), pad = rng.range(1, 5);
  const std::int64_t tokens = shape.back();
  const std::int64_t head_stride = tokens * token_stride + pad;
  if (shape.size() == 2) return HostTensor(DType::f32, shape, {head_stride, token_stride}, 1, 3);
  const std::int64_t batch_stride = shape[1] * head_stride + rng.range(0, 3);
  return HostTensor(DType::f32, shape, {batch_stride, head_stride, token_stride}, 1, 3);
}

// Random normal values of standard deviation `std_dev`, rounded to the dtype, never zero.
void fill_normal(HostTensor& t, double std_dev, Random& rng) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.set(i, rng.normal() * std_dev);
    if (t.get(i) == 0.0) t.set(i, rng.chance(0.5) ? 0.5 * std_dev : -0.5 * std_dev);
  }
}

std::vector<std::int32_t> cumulative(const std::vector<std::int32_t>& lens) {
  std::vector<std::int32_t> cu(lens.size() + 1, 0);
  for (std::size_t b = 0; b < lens.size(); ++b) cu[b + 1] = cu[b] + lens[b];
  return cu;
}

}  // namespace

CaseData::CaseData(const Case& c) : c_(c) {
  Random rng(c.seed);
  const std::int64_t h = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
  std::vector<std::int64_t> q_shape, k_shape, lse_shape;
  if (c.is_varlen()) {
    const std::vector<std::int32_t> cu_q = cumulative(c.seqlens_q), cu_k = cumulative(c.seqlens_k);
    batch_ = static_cast<std::int64_t>(c.seqlens_q.size());
    total_q_ = cu_q.back();
    total_k_ = cu_k.back();
    cu_seqlens_q = HostTensor(DType::i32, {batch_ + 1});
    cu_seqlens_k = HostTensor(DType::i32, {static_cast<std::int64_t>(cu_k.size())});
    for (std::size_t i = 0; i < cu_q.size(); ++i) cu_seqlens_q.set(static_cast<std::int64_t>(i), cu_q[i]);
    for (std::size_t i = 0; i < cu_k.size(); ++i) cu_seqlens_k.set(static_cast<std::int64_t>(i), cu_k[i]);
    q_shape = {total_q_, h, d};
    k_shape = {total_k_, hkv, d};
    lse_shape = {h, total_q_};
  } else {
    batch_ = c.batch;
    total_q_ = c.batch * c.seqlen_q;
    total_k_ = c.batch * c.seqlen_k;
    q_shape = {c.batch, c.seqlen_q, h, d};
    k_shape = {c.batch, c.seqlen_k, hkv, d};
    lse_shape = {c.batch, h, c.seqlen_q};
  }
  q = make_operand(c.dtype, q_shape, c.strided, rng);
  k = make_operand(c.dtype, k_shape, c.strided, rng);
  v = make_operand(c.dtype, k_shape, c.strided, rng);
  dout = make_operand(c.dtype, q_shape, c.strided, rng);
  out = make_operand(c.dtype, q_shape, c.strided, rng);
  lse = make_lse(lse_shape, c.strided, rng);
  dq = make_operand(c.dtype, q_shape, c.strided, rng);
  dk = make_operand(c.dtype, k_shape, c.strided, rng);
  dv = make_operand(c.dtype, k_shape, c.strided, rng);
  fill_normal(q, c.qk_std, rng);
  fill_normal(k, c.qk_std, rng);
  fill_normal(v, 1.0, rng);
  fill_normal(dout, 1.0, rng);
  for (HostTensor* t : {&out, &lse, &dq, &dk, &dv}) t->fill_view_bits(poison_bits(t->dtype()));
}

std::size_t HostTensor::storage_bytes() const {
  return static_cast<std::size_t>(std::max<std::int64_t>(storage_elems_, 1)) * dtype_size(view_.dtype);
}

AttentionOptions CaseData::options(Backend backend) const {
  AttentionOptions o;
  o.softmax_scale = c_.scale();
  o.causal = c_.causal;
  o.window_left = c_.window_left;
  o.window_right = c_.window_right;
  o.alignment = c_.alignment;
  o.softcap = c_.softcap;
  if (c_.is_varlen()) {
    o.cu_seqlens_q = cu_seqlens_q.view();
    o.cu_seqlens_k = cu_seqlens_k.view();
    for (std::int32_t len : c_.seqlens_q) o.max_seqlen_q = std::max<std::int64_t>(o.max_seqlen_q, len);
    for (std::int32_t len : c_.seqlens_k) o.max_seqlen_k = std::max<std::int64_t>(o.max_seqlen_k, len);
    o.max_seqlen_q = std::max<std::int64_t>(o.max_seqlen_q, 1);  // CUDA needs > 0
    o.max_seqlen_k = std::max<std::int64_t>(o.max_seqlen_k, 1);
  }
  o.deterministic = c_.deterministic;
  o.backend = backend;
  o.num_threads = c_.num_threads;
  return o;
}

AttentionProblem CaseData::problem() const {
  AttentionProblem p;
  p.dtype = c_.dtype;
  p.batch = batch_;
  p.num_heads = c_.num_heads;
  p.num_kv_heads = c_.num_kv_heads;
  p.head_dim = c_.head_dim;
  p.total_q = total_q_;
  p.total_k = total_k_;
  const bool varlen = c_.is_varlen();
  if (varlen) {
    p.cu_seqlens_q = static_cast<const std::int32_t*>(cu_seqlens_q.view().data);
    p.cu_seqlens_k = static_cast<const std::int32_t*>(cu_seqlens_k.view().data);
    p.seqlen_q = *std::max_element(c_.seqlens_q.begin(), c_.seqlens_q.end());
    p.seqlen_k = *std::max_element(c_.seqlens_k.begin(), c_.seqlens_k.end());
  } else {
    p.seqlen_q = c_.seqlen_q;
    p.seqlen_k = c_.seqlen_k;
  }
  auto operand = [varlen](const HostTensor& t) {
    const TensorView& w = t.view();
    Operand op;
    op.data = w.data;
    if (varlen) {
      op.stride.token = w.stride[0];
      op.stride.head = w.stride[1];
    } else {
      op.stride.batch = w.stride[0];
      op.stride.token = w.stride[1];
      op.stride.head = w.stride[2];
    }
    return op;
  };
  p.q = operand(q);
  p.k = operand(k);
  p.v = operand(v);
  p.out = operand(out);
  p.dout = operand(dout);
  p.dq = operand(dq);
  p.dk = operand(dk);
  p.dv = operand(dv);
  const TensorView& l = lse.view();
  p.lse = static_cast<float*>(l.data);
  if (varlen) {
    p.lse_head_stride = l.stride[0];
    p.lse_token_stride = l.stride[1];
  } else {
    p.lse_batch_stride = l.stride[0];
    p.lse_head_stride = l.stride[1];
    p.lse_token_stride = l.stride[2];
  }
  p.softmax_scale = c_.scale();
  p.softcap = c_.softcap;
  p.window_left = c_.window_left;
  p.window_right = c_.causal ? 0 : c_.window_right;
  p.alignment = c_.alignment;
  p.deterministic = c_.deterministic;
  p.num_threads = c_.num_threads;
  return p;
}

KernelChoice CaseData::run_forward(Backend backend) {
  out.fill_view_bits(poison_bits(out.dtype()));
  lse.fill_view_bits(poison_bits(lse.dtype()));
  if (backend == Backend::cuda) return run_forward_on_device(*this, options(backend));
  return fastattn::forward(q.view(), k.view(), v.view(), out.view(), lse.view(), options(backend));
}

KernelChoice CaseData::run_backward(Backend backend) {
  for (HostTensor* t : {&dq, &dk, &dv}) t->fill_view_bits(poison_bits(t->dtype()));
  if (backend == Backend::cuda) return run_backward_on_device(*this, options(backend));
  return fastattn::backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(),
                            dq.view(), dk.view(), dv.view(), options(backend));
}

void CaseData::set_forward_outputs(const std::vector<double>& out_ref,
                                   const std::vector<double>& lse_ref) {
  // out's logical order is the reference layout already.
  for (std::int64_t i = 0; i < out.numel(); ++i) out.set(i, out_ref[static_cast<std::size_t>(i)]);
  if (c_.is_varlen()) {
    for (std::int64_t i = 0; i < lse.numel(); ++i) lse.set(i, lse_ref[static_cast<std::size_t>(i)]);
    return;
  }
  // lse [batch, heads, seqlen_q] <- reference [heads, batch * seqlen_q].
  const std::int64_t sq = c_.seqlen_q, h = c_.num_heads;
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t t = 0; t < sq; ++t)
        lse.set((b * h + hh) * sq + t, lse_ref[static_cast<std::size_t>(hh * total_q_ + b * sq + t)]);
}

std::vector<double> CaseData::lse_values() const {
  std::vector<double> logical = lse.values();
  if (c_.is_varlen()) return logical;
  const std::int64_t sq = c_.seqlen_q, h = c_.num_heads;
  std::vector<double> r(logical.size());
  for (std::int64_t b = 0; b < batch_; ++b)
    for (std::int64_t hh = 0; hh < h; ++hh)
      for (std::int64_t t = 0; t < sq; ++t)
        r[static_cast<std::size_t>(hh * total_q_ + b * sq + t)] =
            logical[static_cast<std::size_t>((b * h + hh) * sq + t)];
  return r;
}

}  // namespace fastattn::harness
