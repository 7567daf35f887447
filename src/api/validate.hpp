// validate.hpp — caller arguments -> AttentionProblem, or an Error naming what is wrong.
#pragma once

#include <optional>

#include "common/problem.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// Largest head_dim any backend accepts; backends narrow it in dispatch.
constexpr std::int64_t kMaxHeadDim = 256;

AttentionProblem validate_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const std::optional<TensorView>& lse,
                                  const AttentionOptions& options);

AttentionProblem validate_backward(const TensorView& dout, const TensorView& q,
                                   const TensorView& k, const TensorView& v, const TensorView& out,
                                   const TensorView& lse, const TensorView& dq,
                                   const TensorView& dk, const TensorView& dv,
                                   const AttentionOptions& options);

}  // namespace fastattn
