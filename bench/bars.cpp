// bars.cpp — the bar definitions: shapes, the runs each needs, and the verdict.
#include "bars.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "standard_attention.hpp"

namespace fastattn::bench {

namespace {

perf::BenchShape shape(std::int64_t batch, std::int64_t heads, std::int64_t seqlen,
                       DType dtype = DType::f32, bool causal = false) {
  perf::BenchShape s;
  s.batch = batch;
  s.heads = s.kv_heads = heads;
  s.seqlen_q = s.seqlen_k = seqlen;
  s.head_dim = 128;
  s.dtype = dtype;
  s.causal = causal;
  return s;
}

perf::BenchShape with(perf::BenchShape s, DType dtype, bool causal) {
  s.dtype = dtype;
  s.causal = causal;
  return s;
}

std::string key(const std::string& impl, const perf::BenchShape& s, perf::Pass pass) {
  return impl + "|" + s.label() + "|" + s.mask_label() + "|" + perf::to_string(pass);
}

Bar at_least(std::string name, std::string description, double measured, double target,
             std::string unit, std::string detail) {
  Bar b;
  b.name = std::move(name);
  b.description = std::move(description);
  b.measured = measured;
  b.target = target;
  b.unit = std::move(unit);
  b.detail = std::move(detail);
  b.status = std::isfinite(measured) ? (measured >= target ? BarStatus::pass : BarStatus::fail)
                                     : BarStatus::error;
  return b;
}

Bar errored(std::string name, std::string description, const std::string& what) {
  Bar b;
  b.name = std::move(name);
  b.description = std::move(description);
  b.measured = std::nan("");
  b.detail = what;
  b.status = BarStatus::error;
  return b;
}

double percent_of_peak(const perf::BenchResult& r, const perf::Peaks& peaks, std::string* name) {
  const perf::PeakRef ref = perf::peak_for(peaks, r.shape.dtype, r.kernel.isa);
  if (name) *name = ref.name;
  return ref.gflops > 0 ? 100.0 * r.gflops / ref.gflops : std::nan("");
}

}  // namespace

BarShapes bar_shapes(bool quick) {
  BarShapes s;
  s.main = shape(1, 8, quick ? 512 : 2048);
  s.long_seq = shape(1, 2, quick ? 2048 : 16384);
  s.big_batch = quick ? shape(4, 8, 256) : shape(8, 8, 1024);
  s.baseline = shape(1, 2, quick ? 1024 : 8192);
  s.memory_seqlens = quick ? std::vector<std::int64_t>{1024, 4096, 16384}
                           : std::vector<std::int64_t>{4096, 16384, 65536};
  return s;
}

RunCache::RunCache(int threads, perf::TimingOptions timing) : threads_(threads), timing_(timing) {}

const perf::BenchResult& RunCache::run(const std::string& impl, const perf::BenchShape& s,
                                       perf::Pass pass) {
  const std::string k = key(impl, s, pass);
  if (const auto it = index_.find(k); it != index_.end()) return order_[it->second].second;
  if (const auto it = failed_.find(k); it != failed_.end()) throw std::runtime_error(it->second);
  if (on_start_)
    on_start_(fmt::format("{} {} {} {}", impl, s.label(), s.mask_label(), perf::to_string(pass)));
  perf::BenchResult r;
  try {
    r = impl == "fastattn" ? perf::run_attention_bench(s, pass, Backend::cpu, threads_, timing_)
                           : run_standard_bench(s, pass, threads_, timing_);
  } catch (const std::exception& e) {
    failed_[k] = impl + " " + s.label() + " " + perf::to_string(pass) + ": " + e.what();
    throw std::runtime_error(failed_[k]);
  }
  index_[k] = order_.size();
  order_.emplace_back(impl, std::move(r));
  return order_.back().second;
}

const perf::BenchResult& RunCache::fastattn(const perf::BenchShape& s, perf::Pass pass) {
  return run("fastattn", s, pass);
}

const perf::BenchResult* RunCache::standard(const perf::BenchShape& s, perf::Pass pass) {
  if (!baseline_enabled_ || s.dtype != DType::f32) return nullptr;
  return &run("standard", s, pass);
}

const char* to_string(BarStatus status) noexcept {
  switch (status) {
    case BarStatus::pass:
      return "PASS";
    case BarStatus::fail:
      return "FAIL";
    case BarStatus::info:
      return "INFO";
    case BarStatus::not_applicable:
      return "N/A";
    case BarStatus::error:
      return "ERROR";
  }
  return "?";
}

nlohmann::json to_json(const Bar& b) {
  return {
      {"name", b.name},
      {"description", b.description},
      {"measured", std::isfinite(b.measured) ? nlohmann::json(b.measured) : nullptr},
      {"target", b.status == BarStatus::info ? nlohmann::json(nullptr) : nlohmann::json(b.target)},
      {"comparison", b.at_most ? "<=" : ">="},
      {"unit", b.unit},
      {"detail", b.detail},
      {"status", to_string(b.status)}};
}

std::vector<std::string> bar_names() {
  return {"fp32_forward",  "bf16_forward",  "causal_speedup",
          "fp32_backward", "long_sequence", "baseline_8k"};
}

std::vector<Bar> run_bars(RunCache& runs, const perf::Peaks& peaks, const BarShapes& shapes,
                          const std::vector<std::string>& only) {
  using perf::Pass;
  auto wanted = [&](const char* name) {
    return only.empty() || std::find(only.begin(), only.end(), name) != only.end();
  };
  std::vector<Bar> bars;
  // Each bar runs inside its own try: one kernel failing must not hide the other bars.
  auto add = [&](const char* name, const char* description, const std::function<Bar()>& make) {
    if (!wanted(name)) return;
    try {
      bars.push_back(make());
    } catch (const std::exception& e) {
      bars.push_back(errored(name, description, e.what()));
    }
  };
  const perf::BenchShape& m = shapes.main;
  const std::string main_label = m.label();

  add("fp32_forward", "fp32 forward, % of the fp32 FMA peak", [&] {
    const auto& r = runs.fastattn(with(m, DType::f32, false), Pass::forward);
    runs.standard(with(m, DType::f32, false), Pass::forward);
    std::string peak;
    const double pct = percent_of_peak(r, peaks, &peak);
    return at_least("fp32_forward", "fp32 forward " + main_label + ", % of the fp32 FMA peak", pct,
                    70.0, "% of peak", fmt::format("{:.1f} GFLOP/s vs {} peak", r.gflops, peak));
  });

  add("bf16_forward", "bf16 forward, % of the BF16-dot peak", [&] {
    const auto& r = runs.fastattn(with(m, DType::bf16, false), Pass::forward);
    const std::string description =
        "bf16 forward " + with(m, DType::bf16, false).label() + ", % of the BF16-dot peak";
    if (!peaks.bf16_dot_gflops) {
      Bar b;
      b.name = "bf16_forward";
      b.description = description;
      b.unit = "% of peak";
      b.target = 50.0;
      b.measured = 100.0 * r.gflops / peaks.fma_gflops();
      b.detail = fmt::format(
          "{:.1f} GFLOP/s; no AVX-512 BF16 on this CPU (shown: % of the fp32 FMA peak)", r.gflops);
      b.status = BarStatus::not_applicable;
      return b;
    }
    return at_least("bf16_forward", description, 100.0 * r.gflops / *peaks.bf16_dot_gflops, 50.0,
                    "% of peak",
                    fmt::format("{:.1f} GFLOP/s vs bf16 dot peak {:.1f} (fp32 FMA peak {:.1f})",
                                r.gflops, *peaks.bf16_dot_gflops, peaks.fma_gflops()));
  });

  add("causal_speedup", "causal vs non-causal forward time", [&] {
    const auto& dense = runs.fastattn(with(m, DType::f32, false), Pass::forward);
    const auto& causal = runs.fastattn(with(m, DType::f32, true), Pass::forward);
    runs.standard(with(m, DType::f32, true), Pass::forward);
    return at_least("causal_speedup",
                    "fp32 forward " + main_label + ": non-causal time / causal time",
                    dense.timing.median_s / causal.timing.median_s, 1.8, "x",
                    fmt::format("{:.2f} ms vs {:.2f} ms", dense.timing.median_s * 1e3,
                                causal.timing.median_s * 1e3));
  });

  add("fp32_backward", "fp32 backward, % of the fp32 FMA peak", [&] {
    const auto& r = runs.fastattn(with(m, DType::f32, false), Pass::backward);
    runs.standard(with(m, DType::f32, false), Pass::backward);
    std::string peak;
    const double pct = percent_of_peak(r, peaks, &peak);
    return at_least("fp32_backward",
                    "fp32 backward " + main_label + " (2.5x forward FLOPs), % of the fp32 FMA peak",
                    pct, 50.0, "% of peak",
                    fmt::format("{:.1f} GFLOP/s vs {} peak", r.gflops, peak));
  });

  add("long_sequence", "one long sequence vs a large batch", [&] {
    const auto& lng = runs.fastattn(shapes.long_seq, Pass::forward);
    const auto& big = runs.fastattn(shapes.big_batch, Pass::forward);
    runs.standard(shapes.long_seq, Pass::forward);
    runs.standard(shapes.big_batch, Pass::forward);
    return at_least(
        "long_sequence",
        "fp32 forward GFLOP/s: " + shapes.long_seq.label() + " / " + shapes.big_batch.label(),
        100.0 * lng.gflops / big.gflops, 90.0, "%",
        fmt::format("{:.1f} vs {:.1f} GFLOP/s", lng.gflops, big.gflops));
  });

  add("baseline_8k", "standard attention time / fastattn time", [&] {
    const auto& fa = runs.fastattn(shapes.baseline, Pass::forward);
    const perf::BenchResult* base = runs.standard(shapes.baseline, Pass::forward);
    Bar b;
    b.name = "baseline_8k";
    b.description = "fp32 forward " + shapes.baseline.label() +
                    ": standard attention (OpenBLAS) time / fastattn time";
    b.unit = "x";
    if (!base) {
      b.status = BarStatus::not_applicable;
      b.measured = std::nan("");
      b.detail = "baseline disabled (--no-baseline)";
      return b;
    }
    b.measured = base->timing.median_s / fa.timing.median_s;
    b.detail = fmt::format("{:.1f} ms vs {:.1f} ms; extra peak memory {:.0f} MiB vs {:.0f} MiB",
                           base->timing.median_s * 1e3, fa.timing.median_s * 1e3,
                           static_cast<double>(base->peak_extra_bytes) / 1048576.0,
                           static_cast<double>(fa.peak_extra_bytes) / 1048576.0);
    b.status = BarStatus::info;
    return b;
  });
  return bars;
}

}  // namespace fastattn::bench
