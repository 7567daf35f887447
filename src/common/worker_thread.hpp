// worker_thread.hpp — one background thread, kept for its owner's life, that runs one task at a
// time while the calling thread goes on: the CPU form of a second CUDA stream. Users: ring
// attention's K/V transfers and tiling-AllReduce's per-tile reductions (src/distributed/), and
// the cooperative step's CPU part (src/cooperative/step_cuda.cu), whose CPU kernels' OpenMP team
// belongs to the thread that opens the parallel region: one kept thread keeps one team, where a
// thread per step made and tore down a team each step (~1.3 ms of a ~40 ms 1M-token step on the
// H200's 16-core host, 2026-12-02).
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace fastattn {

class WorkerThread {
 public:
  WorkerThread() : thread_([this] { loop(); }) {}
  ~WorkerThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  // Starts `task`; the previous one must have been waited for, and this one must be before
  // anything it reads goes away.
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

}  // namespace fastattn
