// gpu_probe.hpp — which NVIDIA GPUs the driver sees, without linking CUDA.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fastattn::cli {

struct GpuDevice {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::size_t memory_bytes = 0;
};

struct GpuProbe {
  bool driver_found = false;  // libcuda.so.1 could be loaded and initialised
  std::string note;           // why not, when it could not
  std::vector<GpuDevice> devices;
};

// Loads libcuda.so.1 with dlopen and asks the driver API; works in CPU-only builds too.
GpuProbe probe_gpus();

}  // namespace fastattn::cli
