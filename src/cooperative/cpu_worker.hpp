// cpu_worker.hpp — the host thread a CUDA cooperative step runs its CPU part on (part 3), kept
// for the step's life. Why not a std::thread per run: the CPU kernels' OpenMP team belongs to
// the thread that opens the parallel region, so a new thread per run made a team of
// cpu_threads threads and tore it down at its exit, every step (the run's join waited for the
// teardown: ~1.3 ms a step on the H200's 16-core host, 2026-12-02, where a 1M-token decode step
// is ~40 ms). One thread, one team, woken per run.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace fastattn::coop {

class CpuWorker {
 public:
  CpuWorker() : thread_([this] { loop(); }) {}
  ~CpuWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  CpuWorker(const CpuWorker&) = delete;
  CpuWorker& operator=(const CpuWorker&) = delete;

  // Runs `job` on the worker; wait() must follow before anything the job reads goes away.
  void start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = std::move(job);
      busy_ = true;
      error_ = nullptr;
    }
    wake_.notify_all();
  }

  // Waits for the job start() gave (at once when none runs); rethrows what it threw.
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return !busy_; });
    std::exception_ptr error = std::exchange(error_, nullptr);
    lock.unlock();
    if (error) std::rethrow_exception(error);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      std::function<void()> job = std::exchange(job_, nullptr);
      lock.unlock();
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      busy_ = false;
      wake_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;  // a job or stop (worker), the job's end (wait)
  std::function<void()> job_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace fastattn::coop
