// workspace_check.hpp — the checks on a caller's Workspace (AttentionOptions::workspace) that a
// CUDA call uses for its scratch; one function for the forward and the backward, called
// (device_scratch.cu) before anything is written. Host-only, no CUDA headers, so the CPU tests
// check the messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"

namespace fastattn::cuda {

// Sub-buffers start at 256-byte offsets from the scratch's base (scratch_align.hpp), and the
// kernels read them with vector loads (the split-KV combine's float4 rows, the backward's dQ
// accumulator): the base must be 256-byte aligned, as cudaMalloc's and the pool's are.
inline constexpr std::size_t kWorkspaceAlignment = 256;

// Throws invalid_argument naming options.workspace, the expected and the actual value, unless
// `w` holds at least `bytes` from a 256-byte aligned address.
inline void check_workspace(const Workspace& w, std::size_t bytes) {
  if (w.data == nullptr || w.size < bytes) {
    throw Error(ErrorCode::invalid_argument, "options.workspace: expected at least " + std::to_string(bytes) +
                                                 " bytes, got " + std::to_string(w.data ? w.size : 0) +
                                                 (w.data ? "" : " (null data)"));
  }
  const std::uintptr_t misalignment = reinterpret_cast<std::uintptr_t>(w.data) % kWorkspaceAlignment;
  if (misalignment != 0) {
    throw Error(ErrorCode::invalid_argument,
                "options.workspace: expected data aligned to " + std::to_string(kWorkspaceAlignment) +
                    " bytes for the CUDA kernels, got an address 256 * k + " + std::to_string(misalignment));
  }
}

}  // namespace fastattn::cuda
