// timing.hpp — run a callable repeatedly and summarise its wall time.
#pragma once

#include <functional>

namespace fastattn::perf {

struct TimingOptions {
  int warmup = 1;            // untimed calls first (page faults, pools, caches)
  int min_repeats = 3;       // timed calls, at least
  int max_repeats = 100;     // timed calls, at most
  double min_seconds = 1.0;  // keep repeating (up to max_repeats) until this much was timed
};

struct Timing {
  double median_s = 0;
  double min_s = 0;
  double mean_s = 0;
  int repeats = 0;
};

Timing time_repeated(const std::function<void()>& fn, const TimingOptions& options);

}  // namespace fastattn::perf
