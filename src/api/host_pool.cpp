// host_pool.cpp — cached host scratch memory.
#include "api/host_pool.hpp"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fastattn/error.hpp"

namespace fastattn {

AlignedBlock allocate_aligned(std::size_t bytes, const char* what) {
  constexpr std::size_t kAlign = 64;  // a cache line; also AVX-512 vector alignment
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) {
    throw Error(ErrorCode::out_of_memory,
                std::string(what) + ": could not allocate " + std::to_string(bytes) + " bytes of host scratch");
  }
  return AlignedBlock(p);
}

namespace {

// Blocks not in use, kept for the next call. A call takes the smallest block that fits.
struct Pool {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, AlignedBlock>> free_blocks;
};
Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void* thread_scratch(std::size_t bytes) {
  thread_local AlignedBlock block;
  thread_local std::size_t capacity = 0;
  if (bytes > capacity) {
    block.reset();
    block = allocate_aligned(bytes, "host scratch pool");
    capacity = bytes;
  }
  return block.get();
}

HostScratch::HostScratch(const Workspace* user, std::size_t bytes) {
  if (bytes == 0) return;
  if (user) {
    if (user->data == nullptr || user->size < bytes) {
      throw Error(ErrorCode::invalid_argument,
                  "options.workspace: expected at least " + std::to_string(bytes) +
                      " bytes, got " + std::to_string(user->data ? user->size : 0) +
                      (user->data ? "" : " (null data)"));
    }
    data_ = user->data;
    return;
  }
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    std::size_t best = p.free_blocks.size();
    for (std::size_t i = 0; i < p.free_blocks.size(); ++i) {
      if (p.free_blocks[i].first >= bytes &&
          (best == p.free_blocks.size() || p.free_blocks[i].first < p.free_blocks[best].first)) {
        best = i;
      }
    }
    if (best != p.free_blocks.size()) {
      pooled_size_ = p.free_blocks[best].first;
      pooled_ = p.free_blocks[best].second.release();
      p.free_blocks.erase(p.free_blocks.begin() + static_cast<std::ptrdiff_t>(best));
    }
  }
  if (!pooled_) {
    pooled_ = allocate_aligned(bytes, "host scratch pool").release();
    pooled_size_ = bytes;
  }
  data_ = pooled_;
}

HostScratch::~HostScratch() {
  if (!pooled_) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.free_blocks.emplace_back(pooled_size_, AlignedBlock(pooled_));
}

}  // namespace fastattn
