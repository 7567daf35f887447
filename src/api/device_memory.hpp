// device_memory.hpp — memory-capped mode's arithmetic and messages (host only, no CUDA), so
// that the tests check them on any machine. The public side is fastattn/memory.hpp.
#pragma once

#include <cstddef>
#include <string>

#include "api/dispatch.hpp"
#include "common/problem.hpp"
#include "fastattn/memory.hpp"

namespace fastattn {

// What a call needs resident on its device.
struct DeviceMemoryNeed {
  std::size_t tensor_bytes = 0;   // the call's tensors, elements x element size
  std::size_t scratch_bytes = 0;  // KernelChoice::workspace_bytes
  std::size_t total() const;      // saturates at SIZE_MAX
};

// Tensors: forward q, k, v, out (+ lse when requested); backward dout, q, k, v, out, lse, dq,
// dk, dv; cu_seqlens_q/k (int32 [batch + 1]) when varlen. Sizes come from the validated
// problem, so a strided view counts its elements, not the gaps between its rows.
DeviceMemoryNeed device_memory_need(const AttentionProblem& p, Direction direction,
                                    std::size_t scratch_bytes);

// The limit for a call: options.device_memory_limit_bytes when non-zero (source
// "options.device_memory_limit_bytes"), else device_memory_limit().
DeviceMemoryLimit effective_device_memory_limit(std::size_t option_bytes);

// "512 B", "1.5 KiB", "18.3 GiB": binary units, at most one decimal, ".0" dropped.
std::string format_bytes(std::size_t bytes);

// The message of a call over its limit, e.g.
//   "cuda forward: needs 18.3 GiB of device memory (tensors 17 GiB + scratch 1.3 GiB =
//    19649...bytes), over the 16 GiB limit (17179869184 bytes) set by
//    FASTATTN_DEVICE_MEMORY_LIMIT=16G"
// or "" when the need fits (limit.bytes == 0: no limit).
std::string device_memory_error(const std::string& what, const DeviceMemoryNeed& need,
                                const DeviceMemoryLimit& limit);

// Throws Error(out_of_memory) with device_memory_error's message when the need is over the limit.
void check_device_memory(const std::string& what, const DeviceMemoryNeed& need,
                         const DeviceMemoryLimit& limit);

}  // namespace fastattn
