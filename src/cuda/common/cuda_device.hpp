// cuda_device.hpp — DeviceGuard: device_guard.hpp over the CUDA runtime. The forward and the
// backward (cuda_backend.cu, cuda_backward.cu) hold one for the whole call.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_guard.hpp"

namespace fastattn::cuda {

struct CudaDeviceApi {
  static int current() {
    int device = 0;
    FASTATTN_CUDA_CHECK(cudaGetDevice(&device));
    return device;
  }
  static void make_current(int device) { FASTATTN_CUDA_CHECK(cudaSetDevice(device)); }
  static void restore(int device) noexcept { (void)cudaSetDevice(device); }  // errors surface at the next call
};

using DeviceGuard = BasicDeviceGuard<CudaDeviceApi>;

}  // namespace fastattn::cuda
