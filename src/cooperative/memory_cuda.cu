// memory_cuda.cu — CUDA memory of the cooperative cache (cooperative_internal.hpp): device
// pages (cudaMalloc), pinned host pages (cudaHostAlloc, so copies are DMA without a bounce
// buffer), synchronous copies for append.
#include <cuda_runtime.h>

#include <string>

#include "cooperative/cooperative_internal.hpp"

namespace fastattn::coop {

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  const ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device_error;
  (void)cudaGetLastError();
  throw Error(code, what + ": " + cudaGetErrorString(e));
}

}  // namespace

void* cuda_allocate(int ordinal, std::size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  check(cudaSetDevice(ordinal), std::string(what) + ": cudaSetDevice(" + std::to_string(ordinal) + ")");
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), std::string(what) + ": cudaMalloc of " + std::to_string(bytes) + " bytes");
  return p;
}

void cuda_free(int ordinal, void* p) noexcept {
  if (p == nullptr) return;
  (void)cudaSetDevice(ordinal);
  (void)cudaFree(p);
}

void* cuda_allocate_pinned(std::size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
        std::string(what) + ": cudaHostAlloc of " + std::to_string(bytes) + " bytes (pinned host pages)");
  return p;
}

void cuda_free_pinned(void* p) noexcept {
  if (p != nullptr) (void)cudaFreeHost(p);
}

void cuda_zero(int ordinal, void* p, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaSetDevice(ordinal), "zero: cudaSetDevice");
  check(cudaMemset(p, 0, bytes), "zero: cudaMemset of " + std::to_string(bytes) + " bytes");
}

void cuda_copy(int ordinal, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  check(cudaSetDevice(ordinal), "copy: cudaSetDevice");
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "copy: cudaMemcpy of " + std::to_string(bytes) + " bytes");
}

}  // namespace fastattn::coop
