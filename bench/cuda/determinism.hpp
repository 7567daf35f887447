// determinism.hpp — cuda_bench's `determinism` mode: the deterministic CUDA backward run `runs`
// times (at least 2) on the same inputs (dq, dk, dv of every run compared bitwise with the
// first), and timed against the default backward.
#pragma once

#include <string>

#include "cuda_timing.hpp"

namespace fastattn::bench {

// Which shapes: bar, issue 16's four (the deterministic bar's); pairs, b1..b8 at d 64 (32 heads)
// and d 128 (16 heads), s 4096, no mask: the same work per (batch, KV head) pair over 32..256
// pairs, i.e. fewer or more CTAs of one pair resident at once (tag determinism_pairs);
// pairs_varlen, the same tensors as one varlen batch of b equal sequences, and causal at b2 and
// b8 (tag determinism_pairs_varlen: varlen calls in the padded calls' groups of pairs).
enum class DeterminismShapes { bar, pairs, pairs_varlen };
// "bar", "pairs" or "pairs_varlen"; anything else is an invalid_argument error naming the option.
DeterminismShapes parse_determinism_shapes(const std::string& text);

// Emits one row per shape (or an "error" row when the backward is not available).
void run_determinism_mode(const perf::cuda::EventTimingOptions& timing, int runs = 2,
                          DeterminismShapes shapes = DeterminismShapes::bar);

}  // namespace fastattn::bench
