// device_array.hpp — one cudaMalloc'd block of `bytes` (at least 16 allocated), freed with its
// owner: the device buffers the CUDA benchmarks make beside the library's tensors.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "cuda_timing.hpp"

namespace fastattn::bench {

struct DeviceArray {
  void* data = nullptr;
  std::size_t bytes = 0;
  explicit DeviceArray(std::size_t n) : bytes(n) {
    perf::cuda::check(cudaMalloc(&data, std::max<std::size_t>(n, 16)), "cudaMalloc");
  }
  ~DeviceArray() { cudaFree(data); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};

}  // namespace fastattn::bench
