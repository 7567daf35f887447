// kv_cache_host.cu — see kv_cache_host.hpp.
#include "cuda/inference/kv_cache_host.hpp"

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/cuda_device.hpp"
#include "cuda/common/device_scratch.hpp"

namespace fastattn::cuda {

KVCacheIndices read_kv_cache_indices(const KVCacheProblem& p) {
  const AttentionProblem& a = p.attn;
  const DeviceGuard device_guard(a.device.index);
  const auto stream = static_cast<cudaStream_t>(a.cuda_stream);
  KVCacheIndices r;
  r.seqlens.resize(static_cast<std::size_t>(a.batch));
  if (a.batch > 0) {
    FASTATTN_CUDA_CHECK(cudaMemcpyAsync(r.seqlens.data(), p.seqlens, r.seqlens.size() * sizeof(std::int32_t),
                                        cudaMemcpyDeviceToHost, stream));
  }
  if (p.is_paged() && a.batch > 0 && p.max_pages_per_seq > 0) {
    // One copy of the table's extent (rows may be padded, or even overlap): the last row's
    // last entry is at (batch - 1) * stride + max_pages - 1.
    r.block_table.resize(static_cast<std::size_t>((a.batch - 1) * p.block_table_stride + p.max_pages_per_seq));
    FASTATTN_CUDA_CHECK(cudaMemcpyAsync(r.block_table.data(), p.block_table,
                                        r.block_table.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
  }
  FASTATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return r;
}

void kv_cache_eager(const KVCacheProblem& p, const KVCacheLaunch& launch) {
  const DeviceGuard device_guard(p.attn.device.index);
  DeviceScratch scratch(p.attn, launch.scratch_bytes);  // checks a caller's Workspace (workspace_check.hpp)
  kv_cache_forward(p, launch, scratch.data());
}

void kv_cache_run(const KVCacheProblem& p, const KVCacheLaunch& launch, void* scratch) {
  const DeviceGuard device_guard(p.attn.device.index);
  kv_cache_forward(p, launch, scratch, KVScratch::counters_zeroed);  // zeroed by the plan
}

KVCachePlanScratch::KVCachePlanScratch(int device, std::size_t bytes) : device_(device) {
  if (bytes == 0) return;
  const DeviceGuard device_guard(device);
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so the next call starts clean
    data_ = nullptr;
    throw Error(ErrorCode::out_of_memory, "cuda kv_cache plan: cudaMalloc of " + std::to_string(bytes) +
                                              " bytes of scratch failed: " + cudaGetErrorString(status));
  }
}

KVCachePlanScratch::~KVCachePlanScratch() {
  if (data_ == nullptr) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != device_) (void)cudaSetDevice(device_);
  (void)cudaFree(data_);  // errors here would surface at the next call
  if (previous != device_) (void)cudaSetDevice(previous);
}

}  // namespace fastattn::cuda
