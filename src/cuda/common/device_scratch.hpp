// device_scratch.hpp — scratch device memory for one call, ordered on the call's stream.
//
// The caller's Workspace is used when given (workspace_check.hpp: too small or not 256-byte
// aligned is an error naming it, before anything is written). Otherwise memory comes from
// fastattn's own stream-ordered pool for the device (scratch_pool, cudaMemPoolCreate +
// cudaMallocFromPoolAsync), whose release threshold is raised so freed blocks stay cached: no
// cudaMalloc in the steady state, and the calls stay capturable in a CUDA graph (allocations
// become graph memory nodes). The device's default pool, which other libraries share, is left
// as it is.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "common/problem.hpp"

namespace fastattn::cuda {

// fastattn's scratch pool for `device`, created at the first call (thread-safe) and kept for
// the life of the process.
cudaMemPool_t scratch_pool(int device);

class DeviceScratch {
 public:
  DeviceScratch(const AttentionProblem& p, std::size_t bytes);
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  void* data() const { return data_; }
  // Byte offset into the scratch, 256-byte aligned by the callers' layout (scratch_align.hpp).
  template <class T>
  T* at(std::size_t offset) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(data_) + offset);
  }

 private:
  void* data_ = nullptr;
  bool owned_ = false;
  cudaStream_t stream_ = nullptr;
};

}  // namespace fastattn::cuda
