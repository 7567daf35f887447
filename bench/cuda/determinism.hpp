// determinism.hpp — cuda_bench's `determinism` mode: the deterministic CUDA backward run twice
// on the same inputs (dq, dk, dv compared bitwise), and timed against the default backward.
#pragma once

#include "cuda_timing.hpp"

namespace fastattn::bench {

// Emits one row per shape (or an "error" row when the backward is not available).
void run_determinism_mode(const perf::cuda::EventTimingOptions& timing);

}  // namespace fastattn::bench
