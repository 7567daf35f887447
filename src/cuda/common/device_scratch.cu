// device_scratch.cu — see device_scratch.hpp.
#include "cuda/common/device_scratch.hpp"

#include <cstdint>
#include <mutex>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

// Keeps freed blocks in the device's default pool instead of returning them to the driver.
void keep_pool_cached(int device) {
  static std::mutex mutex;
  static bool done[64] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (device < 0 || device >= 64 || done[device]) return;
  cudaMemPool_t pool = nullptr;
  FASTATTN_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t threshold = UINT64_MAX;
  FASTATTN_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  done[device] = true;
}

}  // namespace

DeviceScratch::DeviceScratch(const AttentionProblem& p, std::size_t bytes)
    : stream_(static_cast<cudaStream_t>(p.cuda_stream)) {
  if (bytes == 0) return;
  if (p.workspace != nullptr) {
    if (p.workspace->data == nullptr || p.workspace->size < bytes) {
      throw Error(ErrorCode::invalid_argument,
                  "options.workspace: expected at least " + std::to_string(bytes) + " bytes, got " +
                      std::to_string(p.workspace->data ? p.workspace->size : 0) +
                      (p.workspace->data ? "" : " (null data)"));
    }
    data_ = p.workspace->data;
    return;
  }
  keep_pool_cached(p.device.index);
  const cudaError_t status = cudaMallocAsync(&data_, bytes, stream_);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so the next call starts clean
    throw Error(ErrorCode::out_of_memory, "cuda scratch: cudaMallocAsync of " + std::to_string(bytes) +
                                              " bytes failed: " + cudaGetErrorString(status));
  }
  owned_ = true;
}

DeviceScratch::~DeviceScratch() {
  if (owned_) cudaFreeAsync(data_, stream_);  // errors here would surface at the next call
}

}  // namespace fastattn::cuda
