// device_mirror.hpp — run a CaseData on a CUDA device with the harness's host-side checks.
//
// Each tensor's whole host allocation (view, padding and guard elements) is copied to device
// memory, the call runs on views at the same offsets, and the outputs' allocations are copied
// back, so the poison, guard and input-unchanged checks of check.cpp apply to device backends
// unchanged.
#pragma once

#include "fastattn/attention.hpp"
#include "harness/tensors.hpp"

namespace fastattn::harness {

// fastattn::forward of `data` on cuda:0 with `options` (cu_seqlens are mirrored too); out and
// lse are copied back to the host tensors. Throws Error(unsupported) in builds without CUDA.
KernelChoice run_forward_on_device(CaseData& data, AttentionOptions options);

// fastattn::backward of `data` on cuda:0: dq, dk, dv and the inputs are copied back.
KernelChoice run_backward_on_device(CaseData& data, AttentionOptions options);

}  // namespace fastattn::harness
