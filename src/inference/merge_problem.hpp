// merge_problem.hpp — a validated merge_states call, and the per-row weights every backend uses.
//
// Plain C++ that nvcc also compiles (src/cuda/inference/merge_states.cu): the weight rule is
// written once, so the CPU, the float64 reference and the CUDA kernel agree on -inf and NaN.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/problem.hpp"
#include "fastattn/tensor.hpp"

#if defined(__CUDACC__)
#define FASTATTN_HOST_DEVICE __host__ __device__
#else
#define FASTATTN_HOST_DEVICE
#endif

namespace fastattn {

// Element strides of an lse tensor [batch, num_heads, seqlen_q]; varlen [num_heads, total_q]
// is normalised to batch 1 (batch stride 0).
struct LseStrides {
  std::int64_t batch = 0;
  std::int64_t head = 0;
  std::int64_t token = 0;
};

struct LseOperand {
  float* data = nullptr;
  LseStrides stride;
};

// Rows are (batch, token, head); a varlen call is one batch of total_q tokens (no cu_seqlens
// needed: the merge is per row).
struct MergeProblem {
  DType dtype = DType::f32;  // of out_a, out_b, out
  Device device{};
  std::int64_t batch = 0;
  std::int64_t seqlen_q = 0;
  std::int64_t num_heads = 0;
  std::int64_t head_dim = 0;

  Operand out_a, out_b, out;     // head_dim contiguous
  LseOperand lse_a, lse_b, lse;  // lse.data null: not requested

  int num_threads = 0;
  void* cuda_stream = nullptr;

  std::int64_t rows() const { return batch * seqlen_q * num_heads; }
};

// Weights of one row: out = weight_a * out_a + weight_b * out_b, lse as merged. A zero weight
// means "do not read that side" (its lse is -inf, or exp underflowed): callers skip it, so a
// side without keys contributes exactly 0 whatever its out holds.
template <typename Real>
struct MergeWeights {
  Real weight_a, weight_b, lse;
};

// exp / log of float in float (device: the CUDA overloads; host: std::), of double in double.
FASTATTN_HOST_DEVICE inline float merge_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
FASTATTN_HOST_DEVICE inline float merge_log(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}
inline double merge_exp(double x) { return std::exp(x); }
inline double merge_log(double x) { return std::log(x); }

template <typename Real>
FASTATTN_HOST_DEVICE inline MergeWeights<Real> merge_weights(Real lse_a, Real lse_b) {
  const Real inf = std::numeric_limits<Real>::infinity();
  // NaN or +inf: forward() never writes them; poison the row (documented in fastattn/merge.hpp).
  if (lse_a != lse_a || lse_b != lse_b || lse_a == inf || lse_b == inf) {
    const Real nan = std::numeric_limits<Real>::quiet_NaN();
    return {nan, nan, nan};
  }
  const Real m = lse_a > lse_b ? lse_a : lse_b;
  if (m == -inf) return {Real(0), Real(0), -inf};  // no keys on either side
  // Max-shift: one exponent is exp(0) = 1, the other in [0, 1]; nothing overflows.
  const Real scaled_a = merge_exp(lse_a - m), scaled_b = merge_exp(lse_b - m);  // exp(-inf) = 0
  const Real sum = scaled_a + scaled_b;                              // in [1, 2]
  return {scaled_a / sum, scaled_b / sum, m + merge_log(sum)};
}

// weight * x, or exactly 0 for a side that does not contribute (weight 0): 0 * NaN would be NaN.
template <typename Real>
FASTATTN_HOST_DEVICE inline Real weighted(Real weight, Real x) {
  return weight == Real(0) ? Real(0) : weight * x;
}

}  // namespace fastattn
