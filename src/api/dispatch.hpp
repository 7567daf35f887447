// dispatch.hpp — the one place that chooses a backend and kernel for a call.
#pragma once

#include "common/problem.hpp"
#include "fastattn/options.hpp"

namespace fastattn {

enum class Direction { forward, backward };

// Chooses the backend, kernel, ISA and tiles for a validated problem, or throws
// Error(unsupported) naming what is missing. Never picks a slower path silently.
KernelChoice choose_kernel(const AttentionProblem& p, Direction direction, Backend requested);

}  // namespace fastattn
