// perf.cpp — time one case through the public API: warm-up, then the median of repeats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "harness/harness.hpp"
#include "harness/tensors.hpp"

namespace fastattn::harness {

std::string PerfReport::to_string() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "median %.3f ms, min %.3f ms, %.2f GFLOP/s", median_seconds * 1e3,
                min_seconds * 1e3, gflops);
  return c.to_string() + "\n  " + choice.describe() + "\n  " + buf;
}

PerfReport measure(const Case& c, Backend backend, const PerfOptions& options) {
  PerfReport report;
  report.c = c;
  report.flops = attention_flops(c, options.backward);
  CaseData data(c);
  const AttentionOptions attn = data.options(backend);
  auto run = [&]() -> KernelChoice {
    if (options.backward) {
      return fastattn::backward(data.dout.view(), data.q.view(), data.k.view(), data.v.view(),
                                data.out.view(), data.lse.view(), data.dq.view(), data.dk.view(),
                                data.dv.view(), attn);
    }
    return fastattn::forward(data.q.view(), data.k.view(), data.v.view(), data.out.view(),
                             data.lse.view(), attn);
  };
  if (options.backward) data.run_forward(backend);  // out and lse for the backward pass
  for (int i = 0; i < options.warmup; ++i) report.choice = run();
  std::vector<double> seconds;
  const int repeats = std::max(options.repeats, 1);
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    report.choice = run();
    const auto t1 = std::chrono::steady_clock::now();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const std::size_t n = seconds.size();
  report.median_seconds = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  report.min_seconds = seconds.front();
  report.gflops = report.median_seconds > 0.0 ? report.flops / report.median_seconds / 1e9 : 0.0;
  return report;
}

}  // namespace fastattn::harness
