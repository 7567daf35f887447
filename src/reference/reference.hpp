// reference.hpp — float64 attention that materialises the score matrix.
//
// The oracle every other backend is compared against (tests, `fastattn check`). It is slow
// and memory-hungry by design: seqlen_q * seqlen_k doubles per (batch, head).
#pragma once

#include <vector>

#include "common/problem.hpp"

namespace fastattn::reference {

// Results in float64, laid out contiguously:
//   out: [total_q, num_heads, head_dim], lse: [num_heads, total_q] (−inf for rows that see no key)
//   dq:  [total_q, num_heads, head_dim], dk, dv: [total_k, num_kv_heads, head_dim]
// where total_q = batch * seqlen_q for padded batches (token b * seqlen_q + t).
struct ForwardResult {
  std::vector<double> out, lse;
};
struct BackwardResult {
  std::vector<double> dq, dk, dv;
};

ForwardResult forward_f64(const AttentionProblem& p);
BackwardResult backward_f64(const AttentionProblem& p);  // uses p.dout; recomputes the forward

// The Backend::reference entry points: compute in float64 and write p.out / p.lse (or
// p.dq / p.dk / p.dv) in the problem's dtype.
void forward(const AttentionProblem& p);
void backward(const AttentionProblem& p);

}  // namespace fastattn::reference
