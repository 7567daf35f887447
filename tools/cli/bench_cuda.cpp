// bench_cuda.cpp — `fastattn bench --device cuda`: every row timed with CUDA events (warm-up,
// then back-to-back timed calls, median), the scratch each row drew from the device pool, and
// the same --json layout as the CPU bench plus the GPU's name.
#include "bench_cuda.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <optional>
#include <string>

#include "cpu_features.hpp"
#include "cuda_attention_bench.hpp"
#include "progress.hpp"
#include "report_json.hpp"
#include "table.hpp"

namespace fastattn::cli {

namespace {

struct CudaOutcome {
  CudaBenchRow row;
  std::optional<perf::cuda::CudaBenchResult> result;
  std::string error;
};

std::string gpu_name() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown GPU";
  return fmt::format("{} (sm{}{}, {} SMs)", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount);
}

std::string kernel_name(const perf::BenchResult& r) {
  std::string name = r.kernel.kernel;
  if (r.kernel_backward) name += " + " + r.kernel_backward->kernel;
  return name;
}

perf::Table make_table(const std::vector<CudaOutcome>& outcomes) {
  using Align = perf::Table::Align;
  perf::Table table;
  for (const char* h : {"shape", "mask", "pass"}) table.add_column(h);
  for (const char* h : {"time", "TFLOP/s", "tensors", "scratch"}) table.add_column(h, Align::right);
  table.add_column("kernel");
  for (const CudaOutcome& o : outcomes) {
    const std::string shape = o.row.shape.label(), mask = o.row.shape.mask_label();
    const std::string pass = perf::to_string(o.row.pass);
    if (!o.result) {
      table.add_row({shape, mask, pass, "-", "-", "-", "-", "error: " + o.error});
      continue;
    }
    const perf::BenchResult& r = o.result->result;
    table.add_row({shape, mask, pass, perf::format_seconds(r.timing.median_s),
                   perf::format_fixed(r.gflops / 1e3, 1),
                   perf::format_bytes(static_cast<double>(r.tensor_bytes)),
                   perf::format_bytes(static_cast<double>(o.result->pool_used_high)),
                   kernel_name(r)});
  }
  return table;
}

}  // namespace

int run_bench_cuda(const BenchArgs& a, const std::vector<CudaBenchRow>& rows, int argc,
                   const char* const* argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print(stderr, "fastattn bench: --device cuda: no CUDA device visible\n");
    return kExitUsage;
  }
  perf::cuda::EventTimingOptions timing;
  timing.warmup = a.warmup;
  timing.min_repeats = a.repeats;
  timing.min_seconds = a.min_time;

  std::vector<CudaOutcome> outcomes;
  {
    perf::ProgressBar progress(static_cast<int>(rows.size()), "bench");
    for (const CudaBenchRow& row : rows) {
      progress.start(row.shape.label() + " " + row.shape.mask_label() + " " +
                     perf::to_string(row.pass));
      CudaOutcome o{row, std::nullopt, ""};
      bool device_error = false;
      try {
        o.result = perf::cuda::run_cuda_attention_bench(row.shape, row.pass, AttentionOptions{},
                                                        timing);
      } catch (const Error& e) {
        o.error = e.what();
        device_error = e.code() == ErrorCode::device_error;
      }
      // A sticky error (e.g. an illegal address) fails every later call: stop here.
      const bool device_broken = device_error && cudaDeviceSynchronize() != cudaSuccess;
      outcomes.push_back(std::move(o));
      progress.finish_item();
      if (device_broken) break;
    }
  }

  const std::string gpu = gpu_name();
  const perf::Table table = make_table(outcomes);
  fmt::print("{}", a.markdown ? table.markdown() : table.text());
  fmt::print("device: {}; CUDA events, median of the timed calls; scratch: the most the "
             "device pool handed out during a row\n",
             gpu);

  int failures = static_cast<int>(rows.size() - outcomes.size());
  nlohmann::json results = nlohmann::json::array();
  for (const CudaOutcome& o : outcomes) {
    if (!o.result) {
      ++failures;
      results.push_back({{"shape", perf::to_json(o.row.shape)},
                         {"pass", perf::to_string(o.row.pass)},
                         {"device", "cuda"},
                         {"error", o.error}});
      continue;
    }
    nlohmann::json j = perf::to_json(o.result->result);
    j["device"] = "cuda";
    j["tflops"] = o.result->result.gflops / 1e3;
    j["pool_used_high_bytes"] = o.result->pool_used_high;
    j["pool_reserved_high_bytes"] = o.result->pool_reserved_high;
    j["free_drop_bytes"] = o.result->free_drop;
    results.push_back(std::move(j));
  }
  if (!a.json_path.empty()) {
    nlohmann::json context = perf::run_context(perf::detect_cpu_features(), argc, argv);
    context["gpu"] = gpu;
    perf::write_json_file(a.json_path, {{"context", context},
                                        {"timing", {{"method", "cuda_events"},
                                                    {"warmup", timing.warmup},
                                                    {"min_repeats", timing.min_repeats},
                                                    {"min_seconds", timing.min_seconds}}},
                                        {"results", results}});
    fmt::print("wrote {}\n", a.json_path);
  }
  return failures ? kExitFailed : kExitOk;
}

}  // namespace fastattn::cli
