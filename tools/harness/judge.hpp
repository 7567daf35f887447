// judge.hpp — the tolerance rule of harness.hpp applied to one output tensor.
//
// Internal to the harness (check.cpp) and its tests.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/harness.hpp"
#include "harness/tensors.hpp"

namespace fastattn::harness {

// Distance from 1 to the next representable value of the dtype (f32 for i32).
double epsilon(DType dtype);

// Error of `got` against `ref`. Entries where both are the same infinity (lse of rows that see
// no key) agree exactly; any other non-finite value on either side makes both measures infinite.
ErrorStats error_of(const std::vector<double>& got, const std::vector<double>& ref);

// Judges one output: `got` are its values (reference layout) read from `tensor` after the run,
// `ref` the float64 oracle, `naive` the naive same-precision results and `terms` their
// absolute term sums (naive.hpp). For lse (is_lse), -inf must appear exactly where the oracle
// has it. Sets every field of TensorCheck. The rule, with u = eps(dtype) (f32 for lse) and
// c = 4 sqrt(head_dim) eps(f32):
//   per row:  max|got - ref| <= 2 max|naive - ref| + u max|ref| + u16/2 max(terms)
//                                + c max(|ref|, terms)
//   tensor:   ||got - ref||_F <= 2 ||naive - ref||_F + u ||ref|| + c max(||ref||, ||terms||_F)
// A row is the head_dim values of one (token, head) of out, dq, dk or dv, and one value of lse;
// the first three maxima of the per-row rule are over that row only, the last over the whole
// tensor (a few f32 ulps of its largest term sums: judge.cpp says why). u16 = u for f16 and
// bf16 outputs, else 0: half an ulp per term, for kernels that round P and dS to the dtype. Relative Frobenius:
// both sides over ||ref||, or over 1 when ref is all zero. TensorCheck's max-abs figures are
// those of its worst row.
TensorCheck judge_tensor(const char* name, const HostTensor& tensor, const std::vector<double>& got,
                         const std::vector<double>& ref, const std::vector<double>& naive,
                         const std::vector<double>& terms, DType dtype, std::int64_t head_dim,
                         bool is_lse);

}  // namespace fastattn::harness
