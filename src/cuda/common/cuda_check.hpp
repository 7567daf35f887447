// cuda_check.hpp — every CUDA runtime call and launch is checked; errors name the kernel.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "fastattn/error.hpp"

namespace fastattn::cuda {

inline void check(cudaError_t status, const char* what, const std::string& context = {}) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::device_error, std::string(what) + " failed: " +
                                             cudaGetErrorString(status) +
                                             (context.empty() ? "" : " (" + context + ")"));
  }
}

// After a launch: configuration errors surface from cudaGetLastError.
inline void check_launch(const std::string& kernel) {
  check(cudaGetLastError(), "kernel launch", kernel);
}

}  // namespace fastattn::cuda

#define FASTATTN_CUDA_CHECK(call) ::fastattn::cuda::check((call), #call)
