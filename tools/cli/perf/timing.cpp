// timing.cpp — warm-up, repeat until enough time was measured, report the median.
#include "timing.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

namespace fastattn::perf {

Timing time_repeated(const std::function<void()>& fn, const TimingOptions& options) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i < options.warmup; ++i) fn();
  std::vector<double> samples;
  double total = 0.0;
  while (static_cast<int>(samples.size()) < std::max(1, options.max_repeats)) {
    const auto t0 = clock::now();
    fn();
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    samples.push_back(dt);
    total += dt;
    if (static_cast<int>(samples.size()) >= options.min_repeats && total >= options.min_seconds)
      break;
  }
  Timing t;
  t.repeats = static_cast<int>(samples.size());
  t.mean_s = total / t.repeats;
  std::sort(samples.begin(), samples.end());
  t.min_s = samples.front();
  const std::size_t mid = samples.size() / 2;
  t.median_s = samples.size() % 2 ? samples[mid] : 0.5 * (samples[mid - 1] + samples[mid]);
  return t;
}

}  // namespace fastattn::perf
