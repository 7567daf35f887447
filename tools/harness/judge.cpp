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

TensorCheck judge_tensor(const char* name, const HostTensor& tensor, const std::vector<double>& got,
                         const std::vector<double>& ref, const std::vector<double>& naive,
                         const std::vector<double>& terms, DType dtype, std::int64_t head_dim,
                         bool is_lse) {
  TensorCheck t;
  t.name = name;
  t.backend = error_of(got, ref);
  t.naive = error_of(naive, ref);
  double ref_max = 0.0, ref2 = 0.0, terms_max = 0.0, terms2 = 0.0;
  for (double r : ref)
    if (std::isfinite(r)) {
      ref_max = std::max(ref_max, std::fabs(r));
      ref2 += r * r;
    }
  for (double x : terms) {
    terms_max = std::max(terms_max, x);
    terms2 += x * x;
  }
  const double u = is_lse ? epsilon(DType::f32) : epsilon(dtype);
  const double c = 4.0 * std::sqrt(static_cast<double>(head_dim)) * epsilon(DType::f32);
  const double ref_norm = std::sqrt(ref2), denominator = ref2 > 0.0 ? ref_norm : 1.0;
  t.bound.max_abs = 2.0 * t.naive.max_abs + u * ref_max + c * std::max(ref_max, terms_max);
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
  const bool within = t.backend.max_abs <= t.bound.max_abs && t.backend.rel_fro <= t.bound.rel_fro;
  t.pass = t.unwritten == 0 && t.non_finite == 0 && t.padding_clobbered == 0 &&
           t.masked_rows_wrong == 0 && within;
  return t;
}

}  // namespace fastattn::harness
