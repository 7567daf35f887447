// cuda_timing.hpp — GPU time of a callable with CUDA events, and the device memory it needed.
// Shared by `fastattn bench --device cuda` and bench/cuda/cuda_bench; built only with CUDA.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace fastattn::perf::cuda {

// Throws fastattn::Error(device_error) naming the failed call.
void check(cudaError_t status, const char* what);

struct EventTimingOptions {
  int warmup = 3;             // untimed calls first (module load, scratch pool growth)
  int min_repeats = 20;       // timed calls, at least (unless max_seconds cuts them down)
  int max_repeats = 200;      // timed calls, at most
  double min_seconds = 0.0;   // more repeats (up to max_repeats) until this much GPU time
  double max_seconds = 0.0;   // > 0: fewer repeats (down to floor_repeats) for slow calls
  int floor_repeats = 5;      // the fewest timed calls max_seconds may leave
};

struct EventTiming {
  double median_ms = 0;
  double min_ms = 0;
  double mean_ms = 0;
  int repeats = 0;
};

// Runs `fn` (which enqueues work on `stream`) warmup times, times one call to size the run,
// then enqueues the timed calls back to back, each between two events, and synchronises once:
// the CPU runs ahead of the GPU, so launch latency and host jitter stay out of the numbers.
EventTiming time_with_events(const std::function<void()>& fn, cudaStream_t stream,
                             const EventTimingOptions& options);

// Device memory a region needed beyond what was allocated before it: the high-water mark of
// the device's default stream-ordered pool (where fastattn's scratch comes from, see
// src/cuda/common/device_scratch.hpp) and the drop of cudaMemGetInfo's free bytes.
class DeviceMemoryProbe {
 public:
  explicit DeviceMemoryProbe(int device = 0);  // resets the pool's high-water marks
  std::size_t pool_used_high() const;          // bytes the pool handed out at most
  std::size_t pool_reserved_high() const;      // bytes the pool reserved from the device at most
  long long free_drop() const;                 // free bytes at construction minus now

 private:
  cudaMemPool_t pool_ = nullptr;
  std::size_t free_at_start_ = 0;
};

}  // namespace fastattn::perf::cuda
