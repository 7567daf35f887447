// merge_support.hpp — the split-and-merge check of merge_states, shared by the CPU and GPU tests.
//
// One harness Case (random q, k, v, never zero) is attention over all its keys. The keys are
// split at `split` into A = k[:, :split] and B = k[:, split:]; forward() runs on each part with
// lse, merge_states combines them, and the merged (out, lse) is judged against the float64
// oracle of the UNSPLIT call by the harness rule (harness.hpp): error <= 2 x the error of a
// naive same-precision pipeline (naive forward of each part, rounded like a backend's outputs,
// merged in f32 and rounded once) + floor. The merge alone is also checked against a float64
// merge of the very same inputs: one rounding to the dtype plus a few f32 ulps.
//
// A Place says where the calls run: HostPlace (the views as they are), or a device place
// (tests/gpu_merge_states_test.cpp) that mirrors each host tensor on the GPU.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.hpp"
#include "fastattn/fastattn.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"

namespace fastattn::testing {

class Place {
 public:
  virtual ~Place() = default;
  virtual Backend backend() const = 0;
  virtual TensorView view(harness::HostTensor& t) = 0;  // the view a call on this place uses
  virtual void copy_back(harness::HostTensor& t) = 0;   // the place's copy of t into t
  virtual void* stream() { return nullptr; }
};

class HostPlace : public Place {
 public:
  explicit HostPlace(Backend backend = Backend::cpu) : backend_(backend) {}
  Backend backend() const override { return backend_; }
  TensorView view(harness::HostTensor& t) override { return t.view(); }
  void copy_back(harness::HostTensor&) override {}

 private:
  Backend backend_;
};

// Keys [start, start + len) of a padded [batch, seqlen_k, heads, head_dim] view.
inline TensorView key_slice(TensorView t, std::int64_t start, std::int64_t len) {
  t.data = static_cast<std::uint8_t*>(t.data) + start * t.stride[1] * static_cast<std::int64_t>(dtype_size(t.dtype));
  t.shape[1] = len;
  return t;
}

// The mask of part [start, start + len) that sees exactly the keys the full causal (or
// unmasked) bottom-right call lets each query see. Full causal: key j visible to query i when
// j <= i + (seqlen_k - seqlen_q). A part aligned bottom-right has its own offset len - seqlen_q:
//   the last part (start + len = seqlen_k) is plainly causal;
//   an earlier part needs the window (-1, seqlen_k - start - len) instead.
inline void part_mask(const harness::Case& c, std::int64_t start, std::int64_t len, AttentionOptions& o) {
  o.causal = false;
  o.window_left = -1;
  o.window_right = -1;
  o.alignment = MaskAlignment::bottom_right;
  if (!c.causal) return;
  if (start + len == c.seqlen_k) {
    o.causal = true;
  } else {
    o.window_right = c.seqlen_k - start - len;
  }
}

inline AttentionProblem part_problem(AttentionProblem p, const harness::Case& c, std::int64_t start, std::int64_t len) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(p.dtype));
  p.k.data = static_cast<std::uint8_t*>(p.k.data) + start * p.k.stride.token * elem;
  p.v.data = static_cast<std::uint8_t*>(p.v.data) + start * p.v.stride.token * elem;
  p.seqlen_k = len;
  p.total_k = p.batch * len;
  AttentionOptions o;
  part_mask(c, start, len, o);
  p.window_left = o.window_left;
  p.window_right = o.causal ? 0 : o.window_right;
  return p;
}

// How the part and merged outputs are laid out.
struct MergeLayout {
  bool strided = false;  // padded rows, an unaligned base, lse with token stride 2
  bool in_place = false;  // merge into out_a / lse_a
};

// Shapes [B, S, H, D] and [B, H, S], contiguous or padded (strided: 8 extra elements per head
// row, 3 elements of lead so the base is not 16-byte aligned; lse every other float).
inline harness::HostTensor make_out(DType dtype, const harness::Case& c, bool strided) {
  const std::vector<std::int64_t> shape = {c.batch, c.seqlen_q, c.num_heads, c.head_dim};
  if (!strided) return harness::HostTensor(dtype, shape);
  const std::int64_t head = c.head_dim + 8, token = c.num_heads * head, batch = c.seqlen_q * token + 16;
  return harness::HostTensor(dtype, shape, {batch, token, head, 1}, 3, 5);
}
inline harness::HostTensor make_lse(const harness::Case& c, bool strided) {
  const std::vector<std::int64_t> shape = {c.batch, c.num_heads, c.seqlen_q};
  if (!strided) return harness::HostTensor(DType::f32, shape);
  return harness::HostTensor(DType::f32, shape, {c.num_heads * c.seqlen_q * 2 + 1, c.seqlen_q * 2, 2}, 1, 3);
}

// lse [B, H, S] (logical order) -> the reference layout [H, B * S].
inline std::vector<double> lse_reference_layout(const harness::HostTensor& lse, const harness::Case& c) {
  const std::vector<double> v = lse.values();
  std::vector<double> r(v.size());
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t h = 0; h < c.num_heads; ++h)
      for (std::int64_t t = 0; t < c.seqlen_q; ++t)
        r[static_cast<std::size_t>(h * c.batch * c.seqlen_q + b * c.seqlen_q + t)] =
            v[static_cast<std::size_t>((b * c.num_heads + h) * c.seqlen_q + t)];
  return r;
}

inline double round_to(DType dtype, double x) {
  const float f = static_cast<float>(x);
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(f));
    case DType::bf16: return bf16_to_float(float_to_bf16(f));
    default: return f;
  }
}

// The merge rule of fastattn/merge.hpp, written here again on purpose (not the library's
// merge_weights): the oracle must not share the code it checks. Real = double: the float64
// merge; Real = float: the naive same-precision merge.
template <typename Real>
struct RowWeights {
  Real a, b, lse;  // a == 0 / b == 0: that side is not read
};
template <typename Real>
RowWeights<Real> oracle_weights(Real lse_a, Real lse_b) {
  const Real inf = std::numeric_limits<Real>::infinity(), nan = std::numeric_limits<Real>::quiet_NaN();
  if (std::isnan(lse_a) || std::isnan(lse_b) || lse_a == inf || lse_b == inf) return {nan, nan, nan};
  if (lse_a == -inf && lse_b == -inf) return {0, 0, -inf};
  if (lse_a == -inf) return {0, 1, lse_b};
  if (lse_b == -inf) return {1, 0, lse_a};
  const Real hi = std::max(lse_a, lse_b), lo = std::min(lse_a, lse_b);
  const Real lse = hi + std::log1p(std::exp(lo - hi));
  return {std::exp(lse_a - lse), std::exp(lse_b - lse), lse};
}
template <typename Real>
Real oracle_term(Real weight, Real x) {
  return weight == Real(0) ? Real(0) : weight * x;
}

// Per element: |merged - float64 merge of the same inputs| <= eps(dtype) |ref| + 8 eps(f32) |terms|
// + half the dtype's subnormal spacing (out; terms = w_a |a| + w_b |b|; the last term because
// rounding into the subnormal range is exact only to that absolute step, not relative to |ref|:
// an f16 output below 2^-14 rounds to a multiple of 2^-24, which the relative term misses; the
// H200 flagged one such d256 f16 element), and lse within 8 eps(f32) (|max lse| + 1). Counts the
// elements outside; -inf / NaN must match exactly. All in the reference layout.
struct MergeExactness {
  std::int64_t out_outside = 0, lse_outside = 0;
  double out_max_abs = 0.0, lse_max_abs = 0.0;
};
inline MergeExactness merge_exactness(DType dtype, std::int64_t num_heads, std::int64_t head_dim, const std::vector<double>& a,
                                      const std::vector<double>& lse_a, const std::vector<double>& b,
                                      const std::vector<double>& lse_b, const std::vector<double>& got,
                                      const std::vector<double>& got_lse) {
  MergeExactness e;
  const double eps32 = 0x1.0p-23, eps = harness::epsilon(dtype);
  // Half the spacing of the dtype's subnormals: f16 2^-25, bf16 2^-134, f32 2^-150.
  const double subnormal_half_step = dtype == DType::f16 ? 0x1.0p-25 : dtype == DType::bf16 ? 0x1.0p-134 : 0x1.0p-150;
  const std::size_t heads = static_cast<std::size_t>(num_heads), total_q = lse_a.size() / heads;
  for (std::size_t row = 0; row < lse_a.size(); ++row) {
    const RowWeights<double> w = oracle_weights(lse_a[row], lse_b[row]);
    const double m = std::fmax(std::fabs(lse_a[row]), std::fabs(lse_b[row]));
    const double lse_err = std::fabs(got_lse[row] - w.lse);
    const bool lse_same_special = (std::isnan(w.lse) && std::isnan(got_lse[row])) || got_lse[row] == w.lse;
    if (!lse_same_special && !(lse_err <= 8 * eps32 * ((std::isfinite(m) ? m : 0.0) + 1.0))) ++e.lse_outside;
    if (std::isfinite(lse_err)) e.lse_max_abs = std::fmax(e.lse_max_abs, lse_err);
    // out is [total_q, H, D] and lse [H, total_q] (reference layout): row = h * total_q + token.
    const std::size_t h = row / total_q, token = row % total_q;
    for (std::int64_t d = 0; d < head_dim; ++d) {
      const std::size_t i = (token * heads + h) * static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d);
      const double ref = oracle_term(w.a, a[i]) + oracle_term(w.b, b[i]);
      const double terms = std::fabs(oracle_term(w.a, a[i])) + std::fabs(oracle_term(w.b, b[i]));
      const double err = std::fabs(got[i] - ref);
      if (std::isnan(ref) ? !std::isnan(got[i]) : !(err <= eps * std::fabs(ref) + 8 * eps32 * terms + subnormal_half_step)) ++e.out_outside;
      if (std::isfinite(err)) e.out_max_abs = std::fmax(e.out_max_abs, err);
    }
  }
  return e;
}

struct SplitMergeReport {
  std::string what;  // case, split, layout
  KernelChoice merge_choice;
  harness::TensorCheck out, lse;  // the merged result vs float64 of the unsplit call
  MergeExactness exact;           // the merge alone vs a float64 merge of its inputs
  double max_abs_vs_unsplit = 0.0;  // |merged out - forward() over all keys| on the same place
  std::string error;
  bool pass = false;
  std::string to_string() const {
    return what + "\n  merge: " + merge_choice.describe() + "\n  " + out.to_string() + "\n  " + lse.to_string() +
           "\n  exactness: out outside " + std::to_string(exact.out_outside) + " (max abs " +
           std::to_string(exact.out_max_abs) + "), lse outside " + std::to_string(exact.lse_outside) +
           "\n  max |merged - unsplit forward| " + std::to_string(max_abs_vs_unsplit) +
           (error.empty() ? "" : "\n  error: " + error);
  }
};

// The check described at the top of this file, for a padded (not varlen) Case with mask none or
// causal (bottom_right); 0 <= split <= seqlen_k (0 or seqlen_k: one part has no keys at all).
inline SplitMergeReport check_split_merge(const harness::Case& c, std::int64_t split, Place& place,
                                          const MergeLayout& layout = {}) {
  SplitMergeReport r;
  r.what = "case '" + c.to_string() + "' split at key " + std::to_string(split) + (layout.strided ? " strided" : "") +
           (layout.in_place ? " in-place" : "");
  harness::CaseData data(c);
  const AttentionProblem full = data.problem();
  harness::HostTensor out_a = make_out(c.dtype, c, layout.strided), out_b = make_out(c.dtype, c, layout.strided);
  harness::HostTensor lse_a = make_lse(c, layout.strided), lse_b = make_lse(c, layout.strided);
  harness::HostTensor merged = make_out(c.dtype, c, layout.strided), merged_lse = make_lse(c, layout.strided);
  harness::HostTensor unsplit = make_out(c.dtype, c, false);
  for (harness::HostTensor* t : {&out_a, &out_b, &merged, &unsplit}) t->fill_view_bits(harness::poison_bits(c.dtype));
  for (harness::HostTensor* t : {&lse_a, &lse_b, &merged_lse}) t->fill_view_bits(harness::poison_bits(DType::f32));
  try {
    const TensorView q = place.view(data.q), k = place.view(data.k), v = place.view(data.v);
    AttentionOptions o = data.options(place.backend());
    o.cuda_stream = place.stream();
    forward(q, k, v, place.view(unsplit), std::nullopt, o);
    struct Part {
      std::int64_t start, len;
      harness::HostTensor *out, *lse;
    };
    for (const Part& part : {Part{0, split, &out_a, &lse_a}, Part{split, c.seqlen_k - split, &out_b, &lse_b}}) {
      AttentionOptions po = o;
      part_mask(c, part.start, part.len, po);
      forward(q, key_slice(k, part.start, part.len), key_slice(v, part.start, part.len), place.view(*part.out),
              place.view(*part.lse), po);
    }
    for (harness::HostTensor* t : {&out_a, &out_b, &lse_a, &lse_b}) place.copy_back(*t);
    MergeOptions mo;
    mo.backend = place.backend();
    mo.cuda_stream = place.stream();
    harness::HostTensor& dst = layout.in_place ? out_a : merged;
    harness::HostTensor& dst_lse = layout.in_place ? lse_a : merged_lse;
    // The inputs as they were, before an in-place merge overwrites them.
    const std::vector<double> a_in = out_a.values(), b_in = out_b.values();
    const std::vector<double> la_in = lse_reference_layout(lse_a, c), lb_in = lse_reference_layout(lse_b, c);
    r.merge_choice = merge_states(place.view(out_a), place.view(lse_a), place.view(out_b), place.view(lse_b),
                                  place.view(dst), place.view(dst_lse), mo);
    place.copy_back(dst);
    place.copy_back(dst_lse);
    place.copy_back(unsplit);
    const std::vector<double> got = dst.values(), got_lse = lse_reference_layout(dst_lse, c);
    r.exact = merge_exactness(c.dtype, c.num_heads, c.head_dim, a_in, la_in, b_in, lb_in, got, got_lse);

    // The oracle of the unsplit call, and the naive pipeline: naive parts, f32 merge, one rounding.
    const reference::ForwardResult ref = reference::forward_f64(full);
    const harness::NaiveForward naive_full = harness::naive_forward(full);
    const harness::NaiveForward na = harness::naive_forward(part_problem(full, c, 0, split));
    const harness::NaiveForward nb = harness::naive_forward(part_problem(full, c, split, c.seqlen_k - split));
    std::vector<double> naive_out(na.out.size()), naive_lse(na.lse.size());
    const std::size_t total_q = na.lse.size() / static_cast<std::size_t>(c.num_heads);
    for (std::size_t row = 0; row < naive_lse.size(); ++row) {
      const RowWeights<float> w = oracle_weights(static_cast<float>(na.lse[row]), static_cast<float>(nb.lse[row]));
      naive_lse[row] = w.lse;
      const std::size_t h = row / total_q, token = row % total_q;
      for (std::int64_t d = 0; d < c.head_dim; ++d) {
        const std::size_t i = (token * static_cast<std::size_t>(c.num_heads) + h) * static_cast<std::size_t>(c.head_dim) +
                              static_cast<std::size_t>(d);
        naive_out[i] = round_to(c.dtype, oracle_term(w.a, static_cast<float>(na.out[i])) +
                                             oracle_term(w.b, static_cast<float>(nb.out[i])));
      }
    }
    r.out = harness::judge_tensor("out", dst, got, ref.out, naive_out, naive_full.out_terms, c.dtype, c.head_dim, false);
    r.lse = harness::judge_tensor("lse", dst_lse, got_lse, ref.lse, naive_lse, naive_full.lse_terms, DType::f32,
                                  c.head_dim, true);
    const std::vector<double> whole = unsplit.values();
    for (std::size_t i = 0; i < whole.size(); ++i) r.max_abs_vs_unsplit = std::fmax(r.max_abs_vs_unsplit, std::fabs(whole[i] - got[i]));
    // Both are judged against float64 with the same bound; they cannot differ by more than twice it.
    const bool near_unsplit = r.max_abs_vs_unsplit <= 2 * r.out.bound.max_abs;
    r.pass = r.out.pass && r.lse.pass && r.exact.out_outside == 0 && r.exact.lse_outside == 0 && near_unsplit;
  } catch (const Error& e) {
    r.error = e.what();
  }
  return r;
}

}  // namespace fastattn::testing
