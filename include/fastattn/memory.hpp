// fastattn/memory.hpp — memory-capped mode: a ceiling on the device memory one call may need.
//
// Every CUDA call (and plan_*) adds up the device memory it needs resident: its own tensors
// (forward: q, k, v, out and lse when given; backward: dout, q, k, v, out, lse, dq, dk, dv; both:
// cu_seqlens_q/k when given), counted as elements x element size, plus its scratch
// (KernelChoice::workspace_bytes, whether it comes from the caller's Workspace or the cached
// pool). Over the limit, the call throws Error(out_of_memory) before anything is allocated or
// launched, naming the need, the limit and where the limit came from. The CPU and reference
// backends ignore the limit (it caps device memory only).
//
// The limit, first match wins:
//   1. AttentionOptions::device_memory_limit_bytes, when non-zero;
//   2. set_device_memory_limit(bytes), when called with a value (0: no limit, even if 3 is set);
//   3. the environment variable FASTATTN_DEVICE_MEMORY_LIMIT (read once per process, again at
//      reload_environment(), fastattn/environment.hpp; parsed by each CUDA call): bytes or a
//      size with a unit, e.g. "16G", "32GiB", "1.5GB", "0" (no limit). K/M/G/T, KiB/MiB/GiB/TiB
//      are powers of 1024; KB/MB/GB/TB powers of 1000; case-insensitive.
// It is a per-call admission check, not an allocator: memory the caller holds outside the
// call (weights, other activations) is not counted.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace fastattn {

inline constexpr const char* kDeviceMemoryLimitEnv = "FASTATTN_DEVICE_MEMORY_LIMIT";

// Sets the process-wide limit in bytes (0: no limit); std::nullopt goes back to the
// environment variable. Thread-safe.
void set_device_memory_limit(std::optional<std::size_t> bytes);

// The process-wide limit in force (set_device_memory_limit, else FASTATTN_DEVICE_MEMORY_LIMIT).
// bytes == 0: no limit. source: "fastattn::set_device_memory_limit",
// "FASTATTN_DEVICE_MEMORY_LIMIT=<value>" or "" when there is none. Throws
// Error(invalid_argument) naming the variable when its value does not parse.
struct DeviceMemoryLimit {
  std::size_t bytes = 0;
  std::string source;
};
DeviceMemoryLimit device_memory_limit();

// "17179869184", "16G", "16 GiB", "1.5GB" -> bytes, with the units above. Throws
// Error(invalid_argument) "<name>: expected ..., got '<text>'" otherwise.
std::size_t parse_memory_size(const std::string& text, const std::string& name = "memory size");

}  // namespace fastattn
