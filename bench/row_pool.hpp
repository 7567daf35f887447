// row_pool.hpp — a minimal blocking thread pool for the baseline's element-wise loops.
//
// The baseline alternates OpenBLAS sgemm (OpenBLAS's own pthreads) with row loops (softmax,
// dS). Running those loops with OpenMP would leave OpenMP's workers busy-waiting through the
// next sgemm (libgomp spins for a while after a parallel region) and steal its cores; these
// workers sleep on a condition variable instead.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fastattn::bench {

class RowPool {
 public:
  using Body = std::function<void(std::int64_t begin, std::int64_t end)>;

  explicit RowPool(int threads);  // threads - 1 workers; the calling thread is the last one
  ~RowPool();
  RowPool(const RowPool&) = delete;
  RowPool& operator=(const RowPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // body(begin, end) over contiguous chunks of [0, n), one per thread; returns when all ran.
  void parallel_for(std::int64_t n, const Body& body);

 private:
  void work(int index);
  std::pair<std::int64_t, std::int64_t> chunk(int index) const;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const Body* body_ = nullptr;
  std::int64_t n_ = 0;
  std::uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace fastattn::bench
