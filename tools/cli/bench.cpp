// bench.cpp — `fastattn bench`: time forward / backward / both over a grid of shapes.
//
// Every combination of the list options is one row. Peaks are measured in the same run, before
// and after the rows (per thread count; the better of the two counts), so "% peak" compares
// numbers taken under the same machine load.
#include <fmt/format.h>
#include <omp.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attention_bench.hpp"
#include "commands.hpp"
#if FASTATTN_CLI_HAVE_CUDA
#include "bench_cuda.hpp"
#endif
#include "cpu_features.hpp"
#include "kv_cache_bench.hpp"
#include "peaks.hpp"
#include "progress.hpp"
#include "report_json.hpp"
#include "table.hpp"

namespace fastattn::cli {

namespace {

// Shapes of the sweep when no shape option is given: the common LLM head size at growing
// lengths, both masks, fp32 and bf16.
void apply_default_sweep(BenchArgs& a) {
  a.batch = {1};
  a.heads = {8};
  a.head_dim = {128};
  a.seqlen = {512, 1024, 2048, 4096};
  if (a.dtype.empty()) a.dtype = {"f32", "bf16"};
  if (a.pass.empty()) a.pass = {"fwd", "bwd"};
}

#if FASTATTN_CLI_HAVE_CUDA
// The GPU sweep when no shape option is given: enough (batch x query blocks x heads) CTAs to
// fill a large GPU, bf16, every pass, both masks.
void apply_default_cuda_sweep(BenchArgs& a) {
  a.batch = {4};
  a.heads = {16};
  a.head_dim = {128};
  a.seqlen = {1024, 2048, 4096, 8192};
  if (a.dtype.empty()) a.dtype = {"bf16"};
  if (a.pass.empty()) a.pass = {"fwd", "bwd", "fwdbwd"};
}
#endif

struct Row {
  perf::BenchShape shape;
  perf::Pass pass = perf::Pass::forward;
  int threads = 0;
};

// rows x values: every row once per value, `set` writing the value into the copy.
template <class T, class Set>
void multiply(std::vector<Row>& rows, const std::vector<T>& values, Set set) {
  std::vector<Row> product;
  for (const Row& row : rows)
    for (const T& value : values) {
      Row copy = row;
      set(copy, value);
      product.push_back(copy);
    }
  rows = std::move(product);
}

// One row per combination of the list options; the first list varies slowest.
std::vector<Row> expand(const BenchArgs& a, const std::vector<bool>& masks) {
  Row base{};
  if (a.window.size() == 2) {
    base.shape.window_left = a.window[0];
    base.shape.window_right = a.window[1];
  }
  base.shape.softcap = a.softcap;
  std::vector<Row> rows = {base};
  multiply(rows, a.threads, [](Row& r, int t) { r.threads = t; });
  multiply(rows, a.dtype,
           [](Row& r, const std::string& d) { r.shape.dtype = perf::dtype_from_string(d); });
  multiply(rows, a.batch, [](Row& r, std::int64_t b) { r.shape.batch = b; });
  multiply(rows, a.heads, [](Row& r, std::int64_t h) { r.shape.heads = r.shape.kv_heads = h; });
  if (!a.kv_heads.empty())
    multiply(rows, a.kv_heads, [](Row& r, std::int64_t h) { r.shape.kv_heads = h; });
  multiply(rows, a.head_dim, [](Row& r, std::int64_t d) { r.shape.head_dim = d; });
  multiply(rows, a.seqlen, [](Row& r, std::int64_t s) { r.shape.seqlen_q = r.shape.seqlen_k = s; });
  if (!a.seqlen_q.empty())
    multiply(rows, a.seqlen_q, [](Row& r, std::int64_t s) { r.shape.seqlen_q = s; });
  if (!a.seqlen_k.empty())
    multiply(rows, a.seqlen_k, [](Row& r, std::int64_t s) { r.shape.seqlen_k = s; });
  multiply(rows, masks, [](Row& r, bool causal) { r.shape.causal = causal; });
  if (a.kv_cache) {  // forward over a KV cache: one row per page size
    const std::vector<std::int64_t> pages = a.page_size.empty() ? std::vector<std::int64_t>{0} : a.page_size;
    multiply(rows, pages, [](Row& r, std::int64_t p) { r.shape.kv_page_size = p < 0 ? -1 : p; });
    return rows;
  }
  multiply(rows, a.pass, [](Row& r, const std::string& p) { r.pass = perf::pass_from_string(p); });
  return rows;
}

// Bytes of K and V a forward pass must read at least once (each KV head's keys once): the
// decode kernel's lower bound, whose rate is compared with the machine's read bandwidth.
double kv_bytes(const perf::BenchShape& s) {
  const double elem = s.dtype == DType::f32 ? 4.0 : 2.0;
  return 2.0 * static_cast<double>(s.batch * s.seqlen_k * s.kv_heads * s.head_dim) * elem;
}
// K+V read rate of a forward row, GB/s; nullopt for other passes.
std::optional<double> kv_read_gbs(const perf::BenchResult& r) {
  if (r.pass != perf::Pass::forward || r.timing.median_s <= 0) return std::nullopt;
  return kv_bytes(r.shape) / r.timing.median_s / 1e9;
}

// Whether a row's K+V fit the CPU's last-level cache (0: size unknown, never): the bench fills
// K and V before timing, so such a row reads them from that cache, and its "% read" against the
// memory read probe (a 512 MiB buffer) is not a memory figure. CPU rows only (`--backend cpu`
// or auto on the CPU); the reference backend reads K and V in its own way (float64).
bool kv_fits_last_level_cache(const perf::BenchShape& s, std::int64_t last_level_cache_bytes, Backend backend) {
  return (backend == Backend::cpu || backend == Backend::automatic) && last_level_cache_bytes > 0 &&
         kv_bytes(s) <= static_cast<double>(last_level_cache_bytes);
}

// A forward row's K+V read rate as a % of the memory read peak measured for its thread count
// (the row's --threads value, the peaks' key); nullopt without a rate (other passes) or a
// positive read peak. The table, its footnote and the JSON all take it from here.
std::optional<double> kv_percent_of_read(const perf::BenchResult& r, int threads,
                                         const std::map<int, perf::Peaks>& peaks) {
  const std::optional<double> kv = kv_read_gbs(r);
  const auto it = peaks.find(threads);
  if (!kv || it == peaks.end() || !it->second.mem_read_gbs || *it->second.mem_read_gbs <= 0) return std::nullopt;
  return 100.0 * *kv / *it->second.mem_read_gbs;
}

std::string kernel_name(const perf::BenchResult& r) {
  std::string name = r.kernel.kernel;
  if (r.kernel_backward) name += " + " + r.kernel_backward->kernel;
  return name;
}

// Peaks per thread count, measured before and after the runs; each field keeps the larger.
std::map<int, perf::Peaks> measure_peaks_for(const perf::CpuFeatures& cpu,
                                             const std::vector<int>& thread_counts,
                                             const std::map<int, perf::Peaks>& earlier) {
  std::map<int, perf::Peaks> peaks;
  for (const int t : thread_counts) {
    if (peaks.count(t)) continue;
    fmt::print(stderr, "measuring peaks on {} threads...\n", t);
    perf::PeakOptions options;
    options.threads = t;
    peaks[t] = perf::measure_peaks(cpu, options);
    if (const auto it = earlier.find(t); it != earlier.end())
      peaks[t] = perf::max_of(peaks[t], it->second);
  }
  return peaks;
}

// One row per attempted run: the result, or what the library threw.
struct Outcome {
  Row row;
  std::optional<perf::BenchResult> result;
  std::string error;
};

std::vector<Outcome> run_rows(const std::vector<Row>& rows, Backend backend,
                              const perf::TimingOptions& timing) {
  std::vector<Outcome> outcomes;
  perf::ProgressBar progress(static_cast<int>(rows.size()), "bench");
  for (const Row& row : rows) {
    progress.start(row.shape.label() + " " + row.shape.mask_label() + " " +
                   perf::to_string(row.pass));
    Outcome o{row, std::nullopt, ""};
    try {
      // kv_page_size -1 (the default, and --page-size -1 beside KV-cache rows): forward().
      o.result = row.shape.kv_page_size >= 0
                     ? perf::run_kv_cache_bench(row.shape, backend, row.threads, timing)
                     : perf::run_attention_bench(row.shape, row.pass, backend, row.threads, timing);
    } catch (const Error& e) {
      o.error = e.what();
    }
    outcomes.push_back(std::move(o));
    progress.finish_item();
  }
  return outcomes;  // the bar is cleared here, before anything is printed
}

// The results table, and whether a row's % read is marked as a cache read (the footnote's cue).
struct BenchTable {
  perf::Table table;
  bool cache_marked = false;
};

BenchTable make_table(const std::vector<Outcome>& outcomes, std::int64_t last_level_cache_bytes, Backend backend,
                      const std::map<int, perf::Peaks>& peaks) {
  BenchTable out;
  perf::Table& table = out.table;
  using Align = perf::Table::Align;
  for (const char* h : {"shape", "mask", "pass", "thr"}) table.add_column(h);
  for (const char* h : {"time", "GFLOP/s", "% peak", "KV GB/s", "% read", "tensors", "+peak mem"})
    table.add_column(h, Align::right);
  table.add_column("kernel");
  for (const Outcome& o : outcomes) {
    const Row& row = o.row;
    if (!o.result) {
      table.add_row({row.shape.label(), row.shape.mask_label(), perf::to_string(row.pass),
                     std::to_string(row.threads), "-", "-", "-", "-", "-", "-", "-", "error: " + o.error});
      continue;
    }
    const perf::BenchResult& r = *o.result;
    std::string percent = "-", kv_rate = "-", kv_percent = "-";
    const std::optional<double> kv = kv_read_gbs(r);
    if (kv) kv_rate = perf::format_fixed(*kv, 1);
    if (const auto it = peaks.find(row.threads); it != peaks.end()) {
      const perf::PeakRef ref = perf::peak_for(it->second, row.shape.dtype, r.kernel.isa);
      if (ref.gflops > 0) percent = perf::format_fixed(100.0 * r.gflops / ref.gflops, 1);
    }
    if (const std::optional<double> read = kv_percent_of_read(r, row.threads, peaks)) {
      kv_percent = perf::format_fixed(*read, 1);
      if (kv_fits_last_level_cache(row.shape, last_level_cache_bytes, backend)) {
        kv_percent += "*";
        out.cache_marked = true;
      }
    }
    table.add_row({row.shape.label(), row.shape.mask_label(), perf::to_string(row.pass),
                   std::to_string(r.threads), perf::format_seconds(r.timing.median_s),
                   perf::format_fixed(r.gflops, 1), percent, kv_rate, kv_percent,
                   perf::format_bytes(static_cast<double>(r.tensor_bytes)),
                   perf::format_bytes(static_cast<double>(r.peak_extra_bytes)), kernel_name(r)});
  }
  return out;
}

}  // namespace

CLI::App* add_bench_command(CLI::App& app, BenchArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "Time forward, backward and forward+backward over shapes (lists: 512,1024)");
  cmd->add_option("--batch", a.batch, "Batch sizes")->delimiter(',');
  cmd->add_option("--seqlen", a.seqlen, "Query sequence lengths")->delimiter(',');
  cmd->add_option("--seqlen-q", a.seqlen_q, "Query sequence lengths, overriding --seqlen's (decode: 1,4)")
      ->delimiter(',');
  cmd->add_option("--seqlen-k", a.seqlen_k, "Key sequence lengths (default: = seqlen)")
      ->delimiter(',');
  cmd->add_option("--heads", a.heads, "Query heads")->delimiter(',');
  cmd->add_option("--kv-heads", a.kv_heads, "KV heads (default: = heads)")->delimiter(',');
  cmd->add_option("--head-dim", a.head_dim, "Head dimensions")->delimiter(',');
  cmd->add_option("--dtype", a.dtype, "f32, bf16, f16 (default: f32)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f32", "fp32", "bf16", "f16", "fp16"}));
  cmd->add_option("--pass", a.pass, "fwd, bwd, fwdbwd (default: all three)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fwd", "bwd", "fwdbwd"}));
  cmd->add_flag("--causal", a.causal, "Causal mask");
  cmd->add_option("--window", a.window, "Sliding window LEFT,RIGHT (-1: unbounded)")
      ->delimiter(',')
      ->expected(2);
  cmd->add_option("--softcap", a.softcap, "Logit soft-cap (0: off)");
  cmd->add_flag("--kv-cache", a.kv_cache,
                "Time attention_with_kv_cache (a KVCachePlan's run) over caches of seqlen-k tokens per sequence "
                "instead of forward(); forward pass only");
  cmd->add_option("--page-size", a.page_size,
                  "KV-cache page sizes (0: contiguous cache; >= 1: paged, pages in shuffled order; -1: plain "
                  "forward() on a contiguous K/V, the anchor); implies --kv-cache")
      ->delimiter(',');
  cmd->add_option("--threads", a.threads, "CPU thread counts (default: all)")->delimiter(',');
  cmd->add_option("--device", a.device, "cpu or cuda (CUDA events; f16/bf16; default bf16)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--backend", a.backend, "cpu, reference or auto (with --device cpu)")
      ->check(CLI::IsMember({"cpu", "reference", "auto"}))
      ->capture_default_str();
  cmd->add_option("--warmup", a.warmup, "Untimed calls per row")->capture_default_str();
  cmd->add_option("--repeats", a.repeats, "Timed calls per row, at least")->capture_default_str();
  cmd->add_option("--min-time", a.min_time, "Seconds of timed calls per row, at least")
      ->capture_default_str();
  cmd->add_flag("--cooperative", a.cooperative,
                "Time the CPU-GPU cooperative step (docs/long-context.md): one sequence of --context tokens, "
                "device pages up to --device-budget / --layers, the rest in pinned host memory");
  cmd->add_option("--context", a.coop_context, "--cooperative: cached tokens")->capture_default_str();
  cmd->add_option("--device-budget", a.coop_budget, "--cooperative: device memory of the KV cache of all layers (e.g. 16G)")
      ->capture_default_str();
  cmd->add_option("--layers", a.coop_layers, "--cooperative: layers sharing the budget (one is timed)")->capture_default_str();
  cmd->add_option("--coop-page-size", a.coop_page_size, "--cooperative: tokens per page")->capture_default_str();
  cmd->add_option("--staging-tokens", a.coop_staging_tokens,
                  "--cooperative: tokens per staging buffer (0: decode 32 MiB of K+V, prefill 8192 tokens; at most half "
                  "the budget each); counted in --device-budget")
      ->capture_default_str();
  cmd->add_option("--strategies", a.coop_strategies,
                  "--cooperative: auto, device, streamed, cpu (each part alone, auto's split), stream_all, cpu_all, forward (one forward() over all keys on the device: the prefill anchor)")
      ->delimiter(',');
  cmd->add_flag("--check", a.coop_check, "--cooperative: error vs float64, beside one single-device call");
  cmd->add_flag("--fixed-rates", a.coop_fixed_rates,
                "--cooperative: auto keeps the rates measured at start (CooperativeOptions::refine_rates off; "
                "by default the step refines them from its own runs)");
  cmd->add_flag("--no-peaks", a.no_peaks, "Do not measure peaks (no % of peak column)");
  cmd->add_flag("--markdown", a.markdown, "Print the table as markdown");
  cmd->add_option("--json", a.json_path, "Write the results as JSON to this file");
  cmd->final_callback([cmd, &a] {
    a.default_sweep = true;
    for (const char* name : {"--batch", "--seqlen", "--seqlen-q", "--seqlen-k", "--heads", "--kv-heads",
                             "--head-dim", "--causal", "--window", "--kv-cache", "--page-size"})
      if (cmd->count(name) > 0) a.default_sweep = false;
    if (cmd->count("--page-size") > 0) a.kv_cache = true;
    a.warmup_given = cmd->count("--warmup") > 0;
    a.repeats_given = cmd->count("--repeats") > 0;
    a.min_time_given = cmd->count("--min-time") > 0;
  });
  return cmd;
}

// --device cuda: the same rows, timed on the GPU (bench_cuda.cpp), in f16/bf16.
int run_bench_on_cuda(BenchArgs a, std::vector<bool> masks, int argc, const char* const* argv) {
  if (!build_info().cuda_compiled) {
    fmt::print(stderr, "fastattn bench: --device cuda: this build has no CUDA backend\n");
    return kExitUsage;
  }
#if FASTATTN_CLI_HAVE_CUDA
  if (a.default_sweep) apply_default_cuda_sweep(a);
  if (a.dtype.empty()) a.dtype = {"bf16"};
  if (!a.warmup_given) a.warmup = 3;
  if (!a.repeats_given) a.repeats = 20;
  if (!a.min_time_given) a.min_time = 0.0;
  a.threads = {0};
  std::vector<CudaBenchRow> rows;
  for (const Row& r : expand(a, masks)) rows.push_back({r.shape, r.pass});
  return run_bench_cuda(a, rows, argc, argv);
#else
  (void)a;
  (void)masks;
  (void)argc;
  (void)argv;
  fmt::print(stderr, "fastattn bench: --device cuda: this CLI was built without CUDA\n");
  return kExitUsage;
#endif
}

int run_bench(BenchArgs a, int argc, const char* const* argv) {
  if (a.cooperative) return run_cooperative_bench(a);
  std::vector<bool> masks = {a.causal};
  if (a.default_sweep) masks = {false, true};
  if (a.batch.empty()) a.batch = {1};
  if (a.heads.empty()) a.heads = {8};
  if (a.head_dim.empty()) a.head_dim = {128};
  if (a.seqlen.empty()) a.seqlen = {2048};
  if (a.pass.empty() && !a.default_sweep) a.pass = {"fwd", "bwd", "fwdbwd"};
  if (a.device == "cuda") {
    if (a.kv_cache) {
      fmt::print(stderr, "fastattn bench: --kv-cache: CPU only for now (the CUDA KV-cache benchmark is the GPU job's)\n");
      return kExitUsage;
    }
    return run_bench_on_cuda(std::move(a), masks, argc, argv);
  }
  if (a.kv_cache) {
    if (a.seqlen_q.empty()) a.seqlen_q = {1};
    a.pass = {"fwd"};
  }
  if (a.default_sweep) apply_default_sweep(a);
  if (a.dtype.empty()) a.dtype = {"f32"};
  if (a.threads.empty()) a.threads = {omp_get_max_threads()};
  const Backend backend = perf::backend_from_string(a.backend);
  const std::vector<Row> rows = expand(a, masks);

  perf::TimingOptions timing;
  timing.warmup = a.warmup;
  timing.min_repeats = a.repeats;
  timing.min_seconds = a.min_time;

  const perf::CpuFeatures cpu = perf::detect_cpu_features();
  std::map<int, perf::Peaks> peaks;
  if (!a.no_peaks) peaks = measure_peaks_for(cpu, a.threads, {});
  const std::vector<Outcome> outcomes = run_rows(rows, backend, timing);
  if (!a.no_peaks) peaks = measure_peaks_for(cpu, a.threads, peaks);

  const BenchTable made = make_table(outcomes, cpu.last_level_cache_bytes, backend, peaks);
  fmt::print("{}", a.markdown ? made.table.markdown() : made.table.text());
  if (made.cache_marked)  // the footnote goes with the table's marks
    fmt::print("* K+V fit this CPU's last-level cache ({:.0f} MiB) and stay there from the fill: "
               "% read compares a cache read with the memory read probe, not memory with memory\n",
               static_cast<double>(cpu.last_level_cache_bytes) / 1048576.0);
  for (const auto& [t, p] : peaks)
    fmt::print(
        "peaks on {} threads (best of before and after): fp32 FMA {:.1f} GFLOP/s, {}{}\n", t,
        p.fma_gflops(),
        p.bf16_dot_gflops ? fmt::format("bf16 dot {:.1f} GFLOP/s", *p.bf16_dot_gflops)
                          : std::string("bf16 dot n/a on this CPU"),
        p.mem_read_gbs ? fmt::format(", memory read {:.1f} GB/s", *p.mem_read_gbs) : std::string());

  int failures = 0;
  nlohmann::json results = nlohmann::json::array();
  for (const Outcome& o : outcomes) {
    if (!o.result) {
      ++failures;
      results.push_back({{"shape", perf::to_json(o.row.shape)},
                         {"pass", perf::to_string(o.row.pass)},
                         {"threads", o.row.threads},
                         {"error", o.error}});
      continue;
    }
    const auto it = peaks.find(o.row.threads);
    results.push_back(perf::to_json(*o.result, it == peaks.end() ? nullptr : &it->second));
    if (const std::optional<double> kv = kv_read_gbs(*o.result)) {
      results.back()["kv_bytes"] = kv_bytes(o.row.shape);
      results.back()["kv_read_gbs"] = *kv;
      if (const std::optional<double> read = kv_percent_of_read(*o.result, o.row.threads, peaks))
        results.back()["kv_read_percent_of_mem_read"] = *read;
      // null: the cache size is unknown (no sysfs entry).
      results.back()["kv_fits_last_level_cache"] =
          cpu.last_level_cache_bytes > 0
              ? nlohmann::json(kv_fits_last_level_cache(o.row.shape, cpu.last_level_cache_bytes, backend))
              : nlohmann::json(nullptr);
    }
  }
  if (!a.json_path.empty()) {
    nlohmann::json peaks_json = nlohmann::json::object();
    for (const auto& [t, p] : peaks) peaks_json[std::to_string(t)] = perf::to_json(p);
    perf::write_json_file(a.json_path, {{"context", perf::run_context(cpu, argc, argv)},
                                        {"peaks_by_threads", peaks_json},
                                        {"results", results}});
    fmt::print("wrote {}\n", a.json_path);
  }
  return failures ? kExitFailed : kExitOk;
}

}  // namespace fastattn::cli
