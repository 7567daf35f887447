// naive.hpp — plain attention in the problem's own precision: the yardstick for tolerances.
//
// Reads the same dtype inputs as a backend, forms the score matrix in f32 (plain sequential dot
// products), soft-maxes it in f32 and rounds the outputs to the dtype: what a careful
// unfused implementation achieves. Its error against the float64 oracle is what a backend's
// error is compared with (harness.hpp). Results use the reference layout of reference.hpp,
// holding the values after rounding (out, dq, dk, dv to the dtype; lse f32).
//
// Alongside each result come its `terms`: per element, the sum of the absolute values of the
// terms it is summed from (out_i: sum_j P_ij |v_j|; dq_i: scale sum_j |dS_ij| |k_j| with
// |dS_ij| = P_ij (|dP_ij| + |D_i|) times the soft-cap factor; lse_i: max(1, largest |score|)).
// Rounding errors of a sum scale with these, not with its value, which cancellation can make
// arbitrarily small (dq is exactly 0 for a row that sees one key); the floor of the tolerance
// uses them.
#pragma once

#include <vector>

#include "common/problem.hpp"

namespace fastattn::harness {

struct NaiveForward {
  std::vector<double> out, lse;
  std::vector<double> out_terms, lse_terms;
};
struct NaiveBackward {
  std::vector<double> dq, dk, dv;
  std::vector<double> dq_terms, dk_terms, dv_terms;
};

NaiveForward naive_forward(const AttentionProblem& p);
// Uses p.dout, p.out and p.lse as given (like a backend's backward pass).
NaiveBackward naive_backward(const AttentionProblem& p);

}  // namespace fastattn::harness
