// judge.cpp — error measures and the pass/fail rule (see harness.hpp for the rule itself).
#include "harness/judge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fastattn::harness {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

double epsilon(DType dtype) {
  switch (dtype) {
    case DType::f16: return 0x1.0p-10;
    case DType::bf16: return 0x1.0p-7;
    default: return 0x1.0p-23;
  }
}

ErrorStats error_of(const std::vector<double>& got, const std::vector<double>& ref) {
  ErrorStats e;
  double diff2 = 0.0, ref2 = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    if (std::isinf(r) && g == r) continue;
    if (!std::isfinite(g) || !std::isfinite(r)) {
      e.max_abs = kInf;
      diff2 = kInf;
      continue;
    }
    const double a = std::fabs(g - r);
    if (a > e.max_abs) e.max_abs = a;
    diff2 += a * a;
    ref2 += r * r;
  }
  e.rel_fro = ref2 > 0.0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return e;
}

namespace {

// |got - ref| of one element with error_of's conventions (same infinities agree; any other
// non-finite value is an infinite error).
double abs_error(double g, double r) {
  if (std::isinf(r) && g == r) return 0.0;
  if (!std::isfinite(g) || !std::isfinite(r)) return kInf;
  return std::fabs(g - r);
}

// error / bound, 0 for 0 / 0 and inf for x / 0 (and for NaN).
double ratio(double error, double bound) {
  if (error == 0.0) return 0.0;
  return bound > 0.0 && error <= kInf ? error / bound : kInf;
}

}  // namespace

TensorCheck judge_tensor(const char* name, const HostTensor& tensor, const std::vector<double>& got,
                         const std::vector<double>& ref, const std::vector<double>& naive,
                         const std::vector<double>& terms, DType dtype, std::int64_t head_dim,
                         bool is_lse) {
  TensorCheck t;
  t.name = name;
  t.backend = error_of(got, ref);
  t.naive = error_of(naive, ref);
  const double u = is_lse ? epsilon(DType::f32) : epsilon(dtype);
  const double c = 4.0 * std::sqrt(static_cast<double>(head_dim)) * epsilon(DType::f32);

  double ref2 = 0.0, terms2 = 0.0, ref_max = 0.0, terms_max = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) {
      ref_max = std::max(ref_max, std::fabs(r));
      ref2 += r * r;
    }
  for (double x : terms) {
    terms_max = std::max(terms_max, x);
    terms2 += x * x;
  }

  // Max-abs, per row: a row is the head_dim values of one (token, head) (lse: one value). Its
  // naive error and its one-ulp term use that row's values, so an error confined to rows of
  // small values is not hidden by the largest values elsewhere. The f32 term stays relative
  // to the tensor's largest term sums: exp(s - lse) in f32 carries an absolute error of a few
  // f32 ulps of the largest scores, so rows made of tiny probabilities (peaky softmax) have
  // relative errors far above their naive ones at that level; it is far below one f16 or bf16
  // ulp of the rows that matter. The reported max-abs figures are those of the row closest to
  // (or furthest over) its bound.
  const double f32_floor = c * std::max(ref_max, terms_max);
  // 16-bit kernels may round P and dS to the dtype before the second product (FlashAttention's
  // tensor-core GEMMs, the CPU bf16 pair kernels): at most half an ulp of each term, u/2 of
  // the row's term sums. The naive baseline keeps them in f32, so this is allowed explicitly.
  const double u16 = !is_lse && (dtype == DType::f16 || dtype == DType::bf16) ? u : 0.0;
  const std::size_t row = is_lse ? 1 : static_cast<std::size_t>(std::max<std::int64_t>(head_dim, 1));
  bool rows_within = true;
  double worst = -1.0;
  for (std::size_t begin = 0; begin < ref.size(); begin += row) {
    const std::size_t end = std::min(ref.size(), begin + row);
    double err = 0.0, naive_err = 0.0, row_ref_max = 0.0, row_terms_max = 0.0;
    for (std::size_t i = begin; i < end; ++i) {
      err = std::max(err, abs_error(got[i], ref[i]));
      naive_err = std::max(naive_err, abs_error(naive[i], ref[i]));
      if (std::isfinite(ref[i])) row_ref_max = std::max(row_ref_max, std::fabs(ref[i]));
      row_terms_max = std::max(row_terms_max, terms[i]);
    }
    const double bound = 2.0 * naive_err + u * row_ref_max + 0.5 * u16 * row_terms_max + f32_floor;
    rows_within = rows_within && err <= bound;
    const double r = ratio(err, bound);
    if (r > worst) {
      worst = r;
      t.worst_row = static_cast<std::int64_t>(begin / row);
      t.backend.max_abs = err;
      t.naive.max_abs = naive_err;
      t.bound.max_abs = bound;
    }
  }

  // Relative Frobenius, over the whole tensor.
  const double ref_norm = std::sqrt(ref2), denominator = ref2 > 0.0 ? ref_norm : 1.0;
  t.bound.rel_fro = 2.0 * t.naive.rel_fro +
                    (u * ref_norm + c * std::max(ref_norm, std::sqrt(terms2))) / denominator;

  t.unwritten = tensor.count_view_bits(poison_bits(tensor.dtype()));
  t.padding_clobbered = tensor.count_guard_clobbered();
  std::int64_t non_finite = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    if (is_lse && std::isinf(r)) {
      if (g != r) ++t.masked_rows_wrong;
    } else if (is_lse && g == -kInf) {
      ++t.masked_rows_wrong;
    } else if (!std::isfinite(g)) {
      ++non_finite;
    }
  }
  // The poison is a NaN: count it once, as unwritten.
  t.non_finite = std::max<std::int64_t>(0, non_finite - t.unwritten);
  // Comparisons with NaN are false, so a NaN error never passes.
  const bool within = rows_within && t.backend.rel_fro <= t.bound.rel_fro;
  t.pass = t.unwritten == 0 && t.non_finite == 0 && t.padding_clobbered == 0 &&
           t.masked_rows_wrong == 0 && within;
  return t;
}

}  // namespace fastattn::harness
