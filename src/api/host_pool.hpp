// host_pool.hpp — cached host scratch memory, so steady-state calls do not allocate.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "fastattn/options.hpp"

namespace fastattn {

// A 64-byte aligned host block that frees itself: the owner of a plan's or a pool's scratch.
struct AlignedFree {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBlock = std::unique_ptr<void, AlignedFree>;

// At least `bytes` (rounded up to 64), 64-byte aligned. Throws Error(out_of_memory) naming
// `what`: "<what>: could not allocate <bytes> bytes of host scratch".
AlignedBlock allocate_aligned(std::size_t bytes, const char* what);

// 64-byte aligned scratch of at least `bytes`, valid until the next call on this thread.
// Grows and keeps the largest block asked for. Throws Error(out_of_memory) on failure.
void* thread_scratch(std::size_t bytes);

// Scratch for one call: the caller's Workspace when given (checked to be large enough; the
// error names the bytes needed), else a block from a process-wide cached pool that is held
// until this object is destroyed.
class HostScratch {
 public:
  HostScratch(const Workspace* user, std::size_t bytes);
  ~HostScratch();
  HostScratch(const HostScratch&) = delete;
  HostScratch& operator=(const HostScratch&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  void* pooled_ = nullptr;
  std::size_t pooled_size_ = 0;
};

}  // namespace fastattn
