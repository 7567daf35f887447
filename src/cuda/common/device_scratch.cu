// device_scratch.cu — see device_scratch.hpp.
#include "cuda/common/device_scratch.hpp"

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/workspace_check.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

cudaMemPool_t scratch_pool(int device) {
  static std::mutex mutex;
  static auto* pools = new std::unordered_map<int, cudaMemPool_t>();  // never destroyed: the
  std::lock_guard<std::mutex> lock(mutex);                            // driver may be gone at exit
  const auto known = pools->find(device);
  if (known != pools->end()) return known->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  FASTATTN_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  // Keep freed blocks cached in this pool instead of returning them to the driver at each
  // synchronisation: no allocation in the steady state.
  std::uint64_t threshold = UINT64_MAX;
  const cudaError_t status = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (status != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    check(status, "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  }
  pools->emplace(device, pool);
  return pool;
}

DeviceScratch::DeviceScratch(const AttentionProblem& p, std::size_t bytes)
    : stream_(static_cast<cudaStream_t>(p.cuda_stream)) {
  if (bytes == 0) return;
  if (p.workspace != nullptr) {
    check_workspace(*p.workspace, bytes);
    data_ = p.workspace->data;
    return;
  }
  const cudaError_t status = cudaMallocFromPoolAsync(&data_, bytes, scratch_pool(p.device.index), stream_);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so the next call starts clean
    throw Error(ErrorCode::out_of_memory, "cuda scratch: cudaMallocFromPoolAsync of " + std::to_string(bytes) +
                                              " bytes failed: " + cudaGetErrorString(status));
  }
  owned_ = true;
}

DeviceScratch::~DeviceScratch() {
  if (owned_) cudaFreeAsync(data_, stream_);  // errors here would surface at the next call
}

}  // namespace fastattn::cuda
