// bars.hpp — the CPU performance bars of bench_cpu: what is measured, against what target.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "attention_bench.hpp"
#include "peaks.hpp"

namespace fastattn::bench {

// The shapes the bars use. Full sizes are for the record; --quick shrinks every length (and
// the large batch) for a smoke test whose numbers mean little.
struct BarShapes {
  perf::BenchShape main;                     // b1 h8 s2048 d128, non-causal
  perf::BenchShape long_seq;                 // b1 h2 s16384 d128
  perf::BenchShape big_batch;                // b8 h8 s1024 d128
  perf::BenchShape baseline;                 // b1 h2 s8192 d128
  std::vector<std::int64_t> memory_seqlens;  // 4k, 16k, 64k
};
BarShapes bar_shapes(bool quick);

// Runs each (implementation, shape, pass) once and remembers it (or the error it threw), so
// bars sharing a run reuse it and evaluating the bars again runs nothing.
class RunCache {
 public:
  RunCache(int threads, perf::TimingOptions timing);
  // While disabled (the default), standard() returns nullptr and runs nothing. bench_cpu times
  // every fastattn run first and the baseline after, so that OpenBLAS's worker threads, which
  // keep spinning for a while after each sgemm, never overlap a fastattn measurement.
  void enable_baseline(bool enabled) { baseline_enabled_ = enabled; }
  // Called with a description before each run that is not cached (for a progress bar).
  void set_on_start(std::function<void(const std::string&)> on_start) {
    on_start_ = std::move(on_start);
  }
  const perf::BenchResult& fastattn(const perf::BenchShape& shape, perf::Pass pass);
  // nullptr when the baseline is disabled or cannot run the shape (not f32).
  const perf::BenchResult* standard(const perf::BenchShape& shape, perf::Pass pass);
  // Every run, in the order it happened, as {"impl", result} pairs.
  const std::vector<std::pair<std::string, perf::BenchResult>>& runs() const { return order_; }

 private:
  const perf::BenchResult& run(const std::string& impl, const perf::BenchShape& shape,
                               perf::Pass pass);
  int threads_;
  perf::TimingOptions timing_;
  bool baseline_enabled_ = false;
  std::function<void(const std::string&)> on_start_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> failed_;  // key -> what it threw
  std::vector<std::pair<std::string, perf::BenchResult>> order_;
};

enum class BarStatus { pass, fail, info, not_applicable, error };
const char* to_string(BarStatus status) noexcept;

struct Bar {
  std::string name;         // "fp32_forward"
  std::string description;  // what is compared, in words
  double measured = 0;      // in `unit`
  double target = 0;        // the pass mark (unused for info)
  bool at_most = false;     // passes when measured <= target (else measured >= target)
  std::string unit;         // "% of peak", "x", "ratio"
  std::string detail;       // the numbers behind `measured`
  BarStatus status = BarStatus::info;
};
nlohmann::json to_json(const Bar& bar);

// The bars in order; `only` (names) selects some, empty runs all. Memory is separate
// (memory_bar) because it spawns processes.
std::vector<Bar> run_bars(RunCache& runs, const perf::Peaks& peaks, const BarShapes& shapes,
                          const std::vector<std::string>& only);
std::vector<std::string> bar_names();

}  // namespace fastattn::bench
