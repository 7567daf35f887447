// bench_cpu.cpp — the CPU performance bars: fastattn side by side with a standard-attention
// baseline (OpenBLAS), peaks measured in the same run, memory against sequence length.
//
//   bench_cpu [--threads N] [--quick] [--bars a,b] [--no-baseline] [--no-memory] [--json F]
// Prints markdown (peaks, bars with PASS/FAIL, every run, memory) and writes JSON to
// bench/results/<machine>-<date>.json; bench/render_performance.py turns that JSON into the
// table of docs/performance.md. Exit status 1 when a bar fails.
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bars.hpp"
#include "cpu_features.hpp"
#include "memory_scaling.hpp"
#include "peaks.hpp"
#include "progress.hpp"
#include "report_json.hpp"
#include "standard_attention.hpp"
#include "table.hpp"

#ifndef FASTATTN_BENCH_RESULTS_DIR
#define FASTATTN_BENCH_RESULTS_DIR "bench/results"
#endif

namespace fastattn::bench {
namespace {

struct Config {
  int threads = 0;
  bool quick = false;
  double min_time = 2.0;
  int min_repeats = 3;
  std::vector<std::string> bars;
  bool no_baseline = false;
  bool no_memory = false;
  bool memory_only = false;
  std::string json_path;
  std::string machine;
  std::int64_t memory_probe = 0;  // internal: run as a --memory-probe child
  std::string memory_impl = "fastattn";
};

std::string mib(double bytes) { return fmt::format("{:.1f}", bytes / 1048576.0); }

std::string optional_gflops(const std::optional<double>& v, const char* unit = "GFLOP/s") {
  return v ? fmt::format("{:.1f} {}", *v, unit) : std::string("n/a on this CPU");
}

void print_peaks(const perf::Peaks& p) {
  fmt::print("| peak ({} threads) | measured |\n|---|---:|\n", p.threads);
  fmt::print("| fp32 FMA, AVX2 | {} |\n", optional_gflops(p.fma_avx2_gflops));
  fmt::print("| fp32 FMA, AVX-512 | {} |\n", optional_gflops(p.fma_avx512_gflops));
  fmt::print("| BF16 dot (vdpbf16ps) | {} |\n", optional_gflops(p.bf16_dot_gflops));
  fmt::print("| memory read | {} |\n\n", optional_gflops(p.mem_read_gbs, "GB/s"));
}

void print_bars(const std::vector<Bar>& bars) {
  perf::Table t;
  using A = perf::Table::Align;
  t.add_column("bar");
  t.add_column("what");
  t.add_column("measured", A::right);
  t.add_column("target", A::right);
  t.add_column("result");
  t.add_column("detail");
  for (const Bar& b : bars) {
    const std::string measured =
        std::isfinite(b.measured) ? fmt::format("{:.2f} {}", b.measured, b.unit) : "-";
    const std::string target =
        b.status == BarStatus::info || b.status == BarStatus::error
            ? "-"
            : fmt::format("{} {:g} {}", b.at_most ? "<=" : ">=", b.target, b.unit);
    t.add_row({b.name, b.description, measured, target, to_string(b.status), b.detail});
  }
  fmt::print("{}\n", t.markdown());
}

void print_runs(const std::vector<std::pair<std::string, perf::BenchResult>>& runs,
                const perf::Peaks& peaks) {
  perf::Table t;
  using A = perf::Table::Align;
  for (const char* h : {"impl", "shape", "mask", "pass"}) t.add_column(h);
  t.add_column("time (ms)", A::right);
  t.add_column("GFLOP/s", A::right);
  t.add_column("% peak", A::right);
  t.add_column("+peak MiB", A::right);
  t.add_column("kernel");
  for (const auto& [impl, r] : runs) {
    const perf::PeakRef ref = perf::peak_for(peaks, r.shape.dtype, r.kernel.isa);
    t.add_row({impl, r.shape.label(), r.shape.mask_label(), perf::to_string(r.pass),
               fmt::format("{:.2f}", r.timing.median_s * 1e3), fmt::format("{:.1f}", r.gflops),
               ref.gflops > 0 ? fmt::format("{:.1f}", 100.0 * r.gflops / ref.gflops) : "-",
               mib(static_cast<double>(r.peak_extra_bytes)), r.kernel.kernel});
  }
  fmt::print("{}\n", t.markdown());
}

// The memory bar: fastattn's peak must grow linearly; the baseline is shown for contrast at
// the two shorter lengths only (its score matrix at 64k would be 16 GiB).
Bar memory_bar(const Config& cfg, const BarShapes& shapes, int threads, nlohmann::json& out) {
  const auto fa = measure_memory_scaling(shapes.memory_seqlens, "fastattn", threads);
  std::vector<MemoryPoint> base;
  if (!cfg.no_baseline)
    base = measure_memory_scaling({shapes.memory_seqlens[0], shapes.memory_seqlens[1]}, "standard",
                                  threads);
  perf::Table t;
  using A = perf::Table::Align;
  t.add_column("impl");
  t.add_column("seqlen", A::right);
  t.add_column("tensors MiB", A::right);
  t.add_column("peak fwd MiB", A::right);
  t.add_column("peak bwd MiB", A::right);
  nlohmann::json points = nlohmann::json::array();
  auto cell = [](const nlohmann::json& j, const char* field) {
    return j.contains(field) && j[field].is_number() ? mib(j[field].get<double>())
                                                     : std::string("-");
  };
  std::vector<MemoryPoint> all = fa;
  all.insert(all.end(), base.begin(), base.end());
  for (const MemoryPoint& p : all) {
    t.add_row({p.impl, std::to_string(p.seqlen), cell(p.probe, "tensor_bytes"),
               cell(p.probe, "peak_forward"), cell(p.probe, "peak_backward")});
    points.push_back(p.probe);
  }
  const perf::BenchShape probe = memory_probe_shape(0);
  fmt::print(
      "Peak resident memory of the whole process, one process per row "
      "(b{} h{} d{} {} {}, forward then backward):\n\n{}\n",
      probe.batch, probe.heads, probe.head_dim, to_string(probe.dtype), probe.mask_label(),
      t.markdown());
  const double ratio_fwd = slope_ratio(fa, "peak_forward");
  const double ratio_bwd = slope_ratio(fa, "peak_backward");
  out = {{"shape", perf::to_json(memory_probe_shape(0))},
         {"points", points},
         {"slope_ratio_forward", std::isfinite(ratio_fwd) ? nlohmann::json(ratio_fwd) : nullptr},
         {"slope_ratio_backward", std::isfinite(ratio_bwd) ? nlohmann::json(ratio_bwd) : nullptr}};
  Bar b;
  b.name = "memory_linear";
  b.description = fmt::format(
      "peak memory growth per token, {}k->{}k over {}k->{}k (1 = linear, 4 = quadratic)",
      shapes.memory_seqlens[1] / 1024, shapes.memory_seqlens[2] / 1024,
      shapes.memory_seqlens[0] / 1024, shapes.memory_seqlens[1] / 1024);
  b.unit = "x";
  b.target = 1.5;
  b.at_most = true;
  b.measured = std::max(ratio_fwd, ratio_bwd);
  b.detail = fmt::format("forward {:.2f}, backward {:.2f}", ratio_fwd, ratio_bwd);
  b.status = std::isfinite(b.measured)
                 ? (b.measured <= b.target ? BarStatus::pass : BarStatus::fail)
                 : BarStatus::error;
  return b;
}

int run(const Config& cfg, int argc, const char* const* argv) {
  const int threads = cfg.threads > 0 ? cfg.threads : omp_get_max_threads();
  if (cfg.memory_probe > 0) return run_memory_probe(cfg.memory_probe, cfg.memory_impl, threads);

  const nlohmann::json load_at_start = perf::load_average();
  const perf::CpuFeatures cpu = perf::detect_cpu_features();
  const std::string machine = cfg.machine.empty() ? perf::machine_slug(cpu, threads) : cfg.machine;
  const BarShapes shapes = bar_shapes(cfg.quick);
  fmt::print("# fastattn CPU benchmark: {} ({}), {} threads, {}{}\n\n", machine,
             cpu.model.empty() ? "unknown CPU" : cpu.model, threads, perf::utc_timestamp(),
             cfg.quick ? " (QUICK: small shapes, numbers are not comparable)" : "");

  // Order matters on a machine this size: the baseline check first (the peak measurement
  // after it outlasts OpenBLAS's spinning workers), then every fastattn run, then the peaks
  // again, then every baseline run.
  nlohmann::json baseline_check = nullptr;
  if (!cfg.no_baseline && !cfg.memory_only) {
    const double disagreement = baseline_disagreement(threads);
    baseline_check = {{"max_relative_difference", disagreement}};
    if (!(disagreement < 1e-3)) {
      fmt::print(stderr,
                 "bench_cpu: the standard-attention baseline disagrees with fastattn by {:.3g} "
                 "(relative); refusing to time it\n",
                 disagreement);
      return 2;
    }
  }

  perf::PeakOptions peak_options;
  peak_options.threads = threads;
  // The memory bar needs no peaks; everything else is judged against them.
  const bool measure = !cfg.memory_only;
  if (measure) fmt::print(stderr, "measuring peaks...\n");
  const perf::Peaks peaks_before = measure ? perf::measure_peaks(cpu, peak_options) : perf::Peaks{};

  perf::TimingOptions timing;
  timing.min_seconds = cfg.min_time;
  timing.min_repeats = cfg.min_repeats;
  RunCache runs(threads, timing);
  // One pass over the bars runs what they need; cached runs are not repeated. No progress bar
  // for a subset of the bars (the run count is only known for all of them).
  auto run_pass = [&](const char* label, int expected) {
    perf::ProgressBar progress(cfg.bars.empty() ? expected : 0, label);
    bool running = false;
    runs.set_on_start([&](const std::string& what) {
      if (running) progress.finish_item();
      running = true;
      progress.start(what);
    });
    run_bars(runs, peaks_before, shapes, cfg.bars);
    runs.set_on_start(nullptr);
  };
  if (!cfg.memory_only) run_pass("fastattn", 7);
  if (measure) fmt::print(stderr, "measuring peaks again...\n");
  const perf::Peaks peaks =
      measure ? perf::max_of(perf::measure_peaks(cpu, peak_options), peaks_before) : peaks_before;
  if (!cfg.memory_only && !cfg.no_baseline) {
    runs.enable_baseline(true);
    run_pass("baseline", 6);
  }
  if (measure) print_peaks(peaks);
  // Verdicts against the better of the two peak measurements; every run is cached by now.
  std::vector<Bar> bars;
  if (!cfg.memory_only) bars = run_bars(runs, peaks, shapes, cfg.bars);
  const auto run_list = runs.runs();
  if (!run_list.empty()) print_runs(run_list, peaks);

  nlohmann::json memory_json;
  const bool memory_wanted =
      !cfg.no_memory && (cfg.bars.empty() || std::find(cfg.bars.begin(), cfg.bars.end(),
                                                       "memory_linear") != cfg.bars.end());
  if (memory_wanted) {
    fmt::print(stderr, "measuring memory in child processes...\n");
    bars.push_back(memory_bar(cfg, shapes, threads, memory_json));
  }
  fmt::print("## Bars\n\n");
  print_bars(bars);

  nlohmann::json runs_json = nlohmann::json::array();
  for (const auto& [impl, r] : run_list) {
    nlohmann::json j = perf::to_json(r, &peaks);
    j["impl"] = impl;
    runs_json.push_back(j);
  }
  nlohmann::json bars_json = nlohmann::json::array();
  int failed = 0;
  for (const Bar& b : bars) {
    bars_json.push_back(to_json(b));
    failed += b.status == BarStatus::fail || b.status == BarStatus::error;
  }
  // A full run owns <machine>-<date>.json; partial and quick runs never overwrite it.
  const char* suffix = cfg.quick           ? "-quick"
                       : cfg.memory_only   ? "-memory"
                       : !cfg.bars.empty() ? "-partial"
                                           : "";
  const std::string json_path = cfg.json_path.empty()
                                    ? fmt::format("{}/{}-{}{}.json", FASTATTN_BENCH_RESULTS_DIR,
                                                  machine, perf::utc_date(), suffix)
                                    : cfg.json_path;
  perf::write_json_file(json_path,
                        {{"kind", "bench_cpu"},
                         {"context", perf::run_context(cpu, argc, argv)},
                         {"machine", machine},
                         {"load_average_1min_at_start", load_at_start},
                         {"threads", threads},
                         {"quick", cfg.quick},
                         {"config",
                          {{"min_time_s", cfg.min_time},
                           {"min_repeats", cfg.min_repeats},
                           {"baseline", !cfg.no_baseline},
                           {"bars", cfg.bars}}},
                         {"peaks", measure ? perf::to_json(peaks) : nlohmann::json()},
                         {"baseline_check", baseline_check},
                         {"openblas_core", openblas_corename()},
                         {"openblas_coretype_env",
                          std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : ""},
                         {"bars", bars_json},
                         {"runs", runs_json},
                         {"memory", memory_json}});
  fmt::print("wrote {}\n", json_path);
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace fastattn::bench

int main(int argc, char** argv) {
  // Re-run once with OPENBLAS_CORETYPE set when OpenBLAS loaded kernels weaker than the CPU
  // supports (see better_openblas_coretype); the variable is read only at load time.
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    if (const char* core =
            fastattn::bench::better_openblas_coretype(fastattn::perf::detect_cpu_features())) {
      std::fprintf(stderr,
                   "bench_cpu: OpenBLAS chose %s kernels for this CPU; rerunning with "
                   "OPENBLAS_CORETYPE=%s\n",
                   fastattn::bench::openblas_corename(), core);
      setenv("OPENBLAS_CORETYPE", core, 1);
      execv("/proc/self/exe", argv);
      std::perror("bench_cpu: execv");  // carry on with the weaker kernels
    }
  }
  fastattn::bench::Config cfg;
  CLI::App app{"fastattn CPU benchmark: performance bars vs a standard-attention baseline",
               "bench_cpu"};
  app.add_option("--threads", cfg.threads, "Threads for fastattn and OpenBLAS (default: all)");
  app.add_flag("--quick", cfg.quick, "Small shapes: a smoke test, not a measurement");
  app.add_option("--min-time", cfg.min_time, "Seconds of timed calls per run, at least")
      ->capture_default_str();
  app.add_option("--repeats", cfg.min_repeats, "Timed calls per run, at least")
      ->capture_default_str();
  std::vector<std::string> names = fastattn::bench::bar_names();
  names.emplace_back("memory_linear");
  app.add_option("--bars", cfg.bars, "Run only these bars (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember(names));
  app.add_flag("--no-baseline", cfg.no_baseline, "Skip the OpenBLAS standard-attention runs");
  app.add_flag("--no-memory", cfg.no_memory, "Skip the memory-scaling processes");
  app.add_flag("--memory-only", cfg.memory_only, "Only the memory-scaling bar");
  app.add_option("--json", cfg.json_path,
                 "Output file (default: bench/results/<machine>-<date>.json)");
  app.add_option("--machine", cfg.machine, "Machine name for the file (default: from the CPU)");
  app.add_option("--memory-probe", cfg.memory_probe, "Internal: one memory measurement")->group("");
  app.add_option("--memory-impl", cfg.memory_impl, "Internal: fastattn or standard")->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    return fastattn::bench::run(cfg, argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_cpu: error: {}\n", e.what());
    return 2;
  }
}
