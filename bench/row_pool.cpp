// row_pool.cpp — generation-counted wake-ups; workers block, never spin.
#include "row_pool.hpp"

namespace fastattn::bench {

RowPool::RowPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { work(i); });
}

RowPool::~RowPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

std::pair<std::int64_t, std::int64_t> RowPool::chunk(int index) const {
  const std::int64_t t = threads();
  return {n_ * index / t, n_ * (index + 1) / t};
}

void RowPool::work(int index) {
  std::uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const Body* body = body_;
    const auto [begin, end] = chunk(index);
    lock.unlock();
    if (begin < end) (*body)(begin, end);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

void RowPool::parallel_for(std::int64_t n, const Body& body) {
  std::unique_lock<std::mutex> lock(mutex_);
  body_ = &body;
  n_ = n;
  pending_ = static_cast<int>(workers_.size());
  ++generation_;
  const auto [begin, end] = chunk(0);
  lock.unlock();
  wake_.notify_all();
  if (begin < end) body(begin, end);
  lock.lock();
  done_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace fastattn::bench
