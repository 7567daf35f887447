// unit_queue.hpp — work units handed to a team of threads: contiguous ranges, one per thread,
// each taken from its front; a thread whose range is done takes the next units of the other
// threads' ranges (the following thread's first).
//
// Why not `omp for schedule(dynamic)`: that hands unit u to whichever thread asks next, so on
// 16 threads a thread's consecutive units are ~16 apart, usually another head, and every unit
// brings its head's K/V (1 MiB at s2048 d128 bf16) from L3 into that core's L2. With ranges a
// thread's units are neighbours (the same head, its K/V already in L2) while a slow core still
// cannot hold up the call: its units go to whoever is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

namespace fastattn::cpu {

class UnitQueue {
 public:
  // Call from one thread while no thread takes units (e.g. in `omp single`).
  void reset(std::int64_t units, int threads) {
    if (threads > capacity_) {
      ranges_ = std::make_unique<Range[]>(static_cast<std::size_t>(threads));
      capacity_ = threads;
    }
    threads_ = threads;
    for (int t = 0; t < threads; ++t) {
      ranges_[t].next.store(units * t / threads, std::memory_order_relaxed);
      ranges_[t].end = units * (t + 1) / threads;
    }
  }

  // The next unit for thread t (its own range first, then the others' in order), or -1 when
  // every unit has been taken.
  std::int64_t next(int t) {
    for (int k = 0; k < threads_; ++k) {
      Range& r = ranges_[(t + k) % threads_];
      if (r.next.load(std::memory_order_relaxed) >= r.end) continue;
      const std::int64_t u = r.next.fetch_add(1, std::memory_order_relaxed);
      if (u < r.end) return u;
    }
    return -1;
  }

 private:
  struct alignas(64) Range {  // one cache line each: threads take units without false sharing
    std::atomic<std::int64_t> next{0};
    std::int64_t end = 0;
  };
  std::unique_ptr<Range[]> ranges_;
  int capacity_ = 0;
  int threads_ = 0;
};

}  // namespace fastattn::cpu
