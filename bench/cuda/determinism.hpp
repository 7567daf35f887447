// determinism.hpp — cuda_bench's `determinism` mode: the deterministic CUDA backward run `runs`
// times (at least 2) on the same inputs (dq, dk, dv of every run compared bitwise with the
// first), and timed against the default backward.
#pragma once

#include "cuda_timing.hpp"

namespace fastattn::bench {

// Emits one row per shape (or an "error" row when the backward is not available).
void run_determinism_mode(const perf::cuda::EventTimingOptions& timing, int runs = 2);

}  // namespace fastattn::bench
