// memory.cpp — the memory of the cooperative cache's two tiers: CUDA device memory and pinned
// host memory (memory_cuda.cu) for a CUDA cache, aligned host memory for the CPU emulation.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cooperative/cooperative_internal.hpp"

namespace fastattn::coop {

namespace {

void* aligned_host(std::size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory,
                std::string(what) + ": could not allocate " + std::to_string(bytes) + " bytes of host memory");
  }
  return p;
}

#if !FASTATTN_HAVE_CUDA
[[noreturn]] void no_cuda(const char* what) {
  throw Error(ErrorCode::unsupported,
              std::string(what) + ": expected config.device cpu (this build has no CUDA backend), got cuda");
}
#endif

}  // namespace

void* allocate_device(Device device, std::size_t bytes, const char* what) {
  if (device.type == DeviceType::cpu) return aligned_host(bytes, what);
#if FASTATTN_HAVE_CUDA
  return cuda_allocate(device.index, bytes, what);
#else
  no_cuda(what);
#endif
}

void free_device(Device device, void* p) noexcept {
  if (p == nullptr) return;
  if (device.type == DeviceType::cpu) {
    std::free(p);
    return;
  }
#if FASTATTN_HAVE_CUDA
  cuda_free(device.index, p);
#endif
}

void* allocate_host(Device device, std::size_t bytes, const char* what) {
  if (device.type == DeviceType::cpu) return aligned_host(bytes, what);
#if FASTATTN_HAVE_CUDA
  return cuda_allocate_pinned(bytes, what);
#else
  no_cuda(what);
#endif
}

void free_host(Device device, void* p) noexcept {
  if (p == nullptr) return;
  if (device.type == DeviceType::cpu) {
    std::free(p);
    return;
  }
#if FASTATTN_HAVE_CUDA
  cuda_free_pinned(p);
#endif
}

void copy_bytes(Device device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (device.type == DeviceType::cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FASTATTN_HAVE_CUDA
  cuda_copy(device.index, dst, src, bytes);
#else
  no_cuda("copy");
#endif
}

}  // namespace fastattn::coop
