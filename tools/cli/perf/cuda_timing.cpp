// cuda_timing.cpp — event-timed repeats and memory-pool probes.
#include "cuda_timing.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "fastattn/error.hpp"

namespace fastattn::perf::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw Error(ErrorCode::device_error,
                std::string(what) + ": " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
}

namespace {

// Events are created once per timed run; a run has at most max_repeats + 1 pairs.
struct EventPairs {
  std::vector<cudaEvent_t> start, stop;
  explicit EventPairs(int n) : start(static_cast<std::size_t>(n)), stop(static_cast<std::size_t>(n)) {
    for (int i = 0; i < n; ++i) {
      check(cudaEventCreate(&start[static_cast<std::size_t>(i)]), "cudaEventCreate");
      check(cudaEventCreate(&stop[static_cast<std::size_t>(i)]), "cudaEventCreate");
    }
  }
  ~EventPairs() {
    for (std::size_t i = 0; i < start.size(); ++i) {
      cudaEventDestroy(start[i]);
      cudaEventDestroy(stop[i]);
    }
  }
  EventPairs(const EventPairs&) = delete;
  EventPairs& operator=(const EventPairs&) = delete;
};

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

int choose_repeats(double probe_ms, const EventTimingOptions& o) {
  const double probe_s = std::max(probe_ms, 1e-6) / 1e3;
  int n = std::max(1, o.min_repeats);
  if (o.min_seconds > 0)
    n = std::max(n, static_cast<int>(std::ceil(o.min_seconds / probe_s)));
  n = std::min(n, std::max(1, o.max_repeats));
  if (o.max_seconds > 0 && n * probe_s > o.max_seconds)
    n = std::max({1, o.floor_repeats, static_cast<int>(o.max_seconds / probe_s)});
  return n;
}

}  // namespace

EventTiming time_with_events(const std::function<void()>& fn, cudaStream_t stream,
                             const EventTimingOptions& options) {
  for (int i = 0; i < options.warmup; ++i) fn();
  check(cudaStreamSynchronize(stream), "warm-up");

  EventPairs probe(1);
  check(cudaEventRecord(probe.start[0], stream), "cudaEventRecord");
  fn();
  check(cudaEventRecord(probe.stop[0], stream), "cudaEventRecord");
  check(cudaEventSynchronize(probe.stop[0]), "cudaEventSynchronize");
  const int n = choose_repeats(elapsed_ms(probe.start[0], probe.stop[0]), options);

  EventPairs events(n);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    check(cudaEventRecord(events.start[i], stream), "cudaEventRecord");
    fn();
    check(cudaEventRecord(events.stop[i], stream), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(stream), "timed calls");
  std::vector<double> ms;
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i)
    ms.push_back(elapsed_ms(events.start[i], events.stop[i]));

  EventTiming t;
  t.repeats = n;
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / n;
  std::sort(ms.begin(), ms.end());
  t.min_ms = ms.front();
  const std::size_t mid = ms.size() / 2;
  t.median_ms = ms.size() % 2 ? ms[mid] : 0.5 * (ms[mid - 1] + ms[mid]);
  return t;
}

DeviceMemoryProbe::DeviceMemoryProbe(int device) {
  check(cudaDeviceGetDefaultMemPool(&pool_, device), "cudaDeviceGetDefaultMemPool");
  // Writing 0 resets a high-water mark to the current value.
  std::uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero), "cudaMemPoolSetAttribute");
  check(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &zero),
        "cudaMemPoolSetAttribute");
  std::size_t total = 0;
  check(cudaMemGetInfo(&free_at_start_, &total), "cudaMemGetInfo");
}

std::size_t DeviceMemoryProbe::pool_used_high() const {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &v), "cudaMemPoolGetAttribute");
  return static_cast<std::size_t>(v);
}

std::size_t DeviceMemoryProbe::pool_reserved_high() const {
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemHigh, &v),
        "cudaMemPoolGetAttribute");
  return static_cast<std::size_t>(v);
}

long long DeviceMemoryProbe::free_drop() const {
  std::size_t free_now = 0, total = 0;
  check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
  return static_cast<long long>(free_at_start_) - static_cast<long long>(free_now);
}

}  // namespace fastattn::perf::cuda
