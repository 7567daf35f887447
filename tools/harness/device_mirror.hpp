// device_mirror.hpp — run a CaseData on a CUDA device with the harness's host-side checks.
//
// Each tensor's whole host allocation (view, padding and guard elements) is copied to device
// memory, the call runs on views at the same offsets, and the outputs' allocations are copied
// back, so the poison, guard and input-unchanged checks of check.cpp apply to device backends
// unchanged.
#pragma once

#include <string>

#include "fastattn/attention.hpp"
#include "harness/tensors.hpp"

namespace fastattn::harness {

// fastattn::forward of `data` on cuda:0 with `options` (cu_seqlens are mirrored too); out and
// lse are copied back to the host tensors. Throws Error(unsupported) in builds without CUDA.
KernelChoice run_forward_on_device(CaseData& data, AttentionOptions options);

// fastattn::backward of `data` on cuda:0: dq, dk, dv and the inputs are copied back.
KernelChoice run_backward_on_device(CaseData& data, AttentionOptions options);

// CUDA-graph check on cuda:0: forward then deterministic backward run eagerly on a stream,
// then the same two calls are captured into a graph on that stream and the graph is replayed
// twice (outputs poisoned before each replay). True when out, lse, dq, dk and dv of every
// replay equal the eager ones bit for bit; `detail` says what differed or failed.
bool graph_replay_matches_eager(CaseData& data, AttentionOptions options, std::string& detail);

}  // namespace fastattn::harness
