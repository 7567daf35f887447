// merge_validate.hpp — merge_states arguments -> MergeProblem, or an Error naming what is wrong.
#pragma once

#include <optional>

#include "fastattn/merge.hpp"
#include "inference/merge_problem.hpp"

namespace fastattn {

// Every check of fastattn::merge_states (fastattn/merge.hpp), in the message style of
// src/api/validate.cpp: "<argument>: expected <what>, got <actual>". Nothing is written.
MergeProblem validate_merge(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                            const TensorView& lse_b, const TensorView& out,
                            const std::optional<TensorView>& lse, const MergeOptions& options);

}  // namespace fastattn
