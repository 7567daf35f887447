// comm_thread.hpp — one background thread that runs a rank's communication while the calling
// thread computes: the CPU form of a second CUDA stream (ring attention's K/V transfers,
// tiling-AllReduce's per-tile reductions).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace fastattn::distributed {

class CommThread {
 public:
  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Starts `task`; the previous one must have been waited for.
  void submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(task);
      busy_ = true;
    }
    cv_.notify_all();
  }
  // Waits for the task and rethrows what it threw. No-op when none is pending.
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    if (error_) {
      std::exception_ptr e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || (busy_ && task_); });
      if (stop_) return;
      std::function<void()> task = std::move(task_);
      task_ = nullptr;
      lock.unlock();
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      busy_ = false;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the members it uses
};

}  // namespace fastattn::distributed
