// check.cpp — `fastattn check`: a backend against the float64 oracle over random cases.
//
// The judging (cases, oracle, naive baseline, tolerance) is fastattn_harness; this file only
// picks the cases, prints one line per case and a summary, and sets the exit code.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_bench.hpp"
#include "commands.hpp"
#include "fastattn/fastattn.hpp"
#include "harness/harness.hpp"
#include "report_json.hpp"

namespace fastattn::cli {

namespace {

// Seed of case `index` of a sweep: distinct per (seed, index), stable across versions.
std::uint64_t case_seed(std::uint64_t seed, int index) {
  return seed * 1000003ull + static_cast<std::uint64_t>(index);
}

// How close a tensor came to its bound: the larger of error / bound over both norms
// (<= 1 passes; inf when the backend wrote NaN or missed elements).
double bound_ratio(const harness::TensorCheck& t) {
  auto ratio = [](double error, double bound) {
    return bound > 0 ? error / bound : (error > 0 ? HUGE_VAL : 0.0);
  };
  return std::max(ratio(t.backend.max_abs, t.bound.max_abs),
                  ratio(t.backend.rel_fro, t.bound.rel_fro));
}

struct Worst {
  double ratio = 0.0;
  std::string tensor;
};

Worst worst_tensor(const harness::CheckReport& r) {
  Worst w;
  for (const auto& t : r.tensors) {
    const double x = bound_ratio(t);
    if (w.tensor.empty() || x > w.ratio) w = {x, t.name};
  }
  return w;
}

// "out 3.1e-07<=9.2e-07 lse ..." : max-abs error vs its bound per tensor.
std::string error_summary(const harness::CheckReport& r) {
  std::string s;
  for (const auto& t : r.tensors)
    s += fmt::format("{}{} {:.1e}<={:.1e}", s.empty() ? "" : "  ", t.name, t.backend.max_abs,
                     t.bound.max_abs);
  return s;
}

nlohmann::json to_json(const harness::CheckReport& r) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : r.tensors)
    tensors.push_back({{"name", t.name},
                       {"pass", t.pass},
                       {"max_abs", t.backend.max_abs},
                       {"rel_fro", t.backend.rel_fro},
                       {"bound_max_abs", t.bound.max_abs},
                       {"bound_rel_fro", t.bound.rel_fro},
                       {"naive_max_abs", t.naive.max_abs},
                       {"naive_rel_fro", t.naive.rel_fro},
                       {"unwritten", t.unwritten},
                       {"non_finite", t.non_finite},
                       {"padding_clobbered", t.padding_clobbered},
                       {"masked_rows_wrong", t.masked_rows_wrong}});
  nlohmann::json j = {{"case", r.c.to_string()}, {"pass", r.pass}, {"tensors", tensors}};
  if (!r.forward_choice.kernel.empty()) j["forward_kernel"] = r.forward_choice.describe();
  if (!r.backward_choice.kernel.empty()) j["backward_kernel"] = r.backward_choice.describe();
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

#if defined(FASTATTN_CLI_HAVE_CUDA)
// What the CUDA kernels of this build cover on cuda:0: f16 and bf16, the build's head dims,
// 16-byte aligned rows (no strided layouts). The Turing and Volta paths (a T4 or V100, or
// FASTATTN_CUDA_PATH=sm75 / sm70) run f16 only, and their backward head_dim <= 128.
harness::CaseLimits cuda_limits(bool backward) {
  const BuildInfo info = build_info();
  harness::CaseLimits limits;
  const std::string path = info.cuda_device_paths.empty() ? "" : info.cuda_device_paths.front();
  const bool lowres = path.rfind("sm75", 0) == 0 || path.rfind("sm70", 0) == 0;
  limits.dtypes = {DType::f16, DType::bf16};
  if (lowres) limits.dtypes = {DType::f16};
  for (int d : info.cuda_head_dims)
    if (!lowres || d <= 128 || (!backward && path.rfind("sm75", 0) == 0)) limits.head_dims.push_back(d);
  limits.allow_strided = false;
  return limits;
}
#endif

}  // namespace

CLI::App* add_check_command(CLI::App& app, CheckArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "check", "Compare a backend with the float64 oracle on random cases (exit 1 on failure)");
  cmd->add_option("--backend", args.backend, "cpu, reference or cuda")
      ->check(CLI::IsMember({"cpu", "reference", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--cases", args.cases, "Number of random cases")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", args.seed, "Seed of the sweep")->capture_default_str();
  cmd->add_flag("--quick", args.quick, "A short sweep of small cases (25 cases)");
  cmd->add_option("--case", args.case_strings,
                  "Run exactly this case (as printed by a failure); repeatable");
  cmd->add_flag("--forward-only", args.forward_only, "Check the forward pass only");
  cmd->add_flag("--backward-only", args.backward_only, "Check the backward pass only");
  cmd->add_flag("-v,--verbose", args.verbose, "Print every tensor of every case");
  cmd->add_option("--threads", args.threads, "CPU threads per call (default: all)");
  cmd->add_option("--json", args.json_path, "Write every case's result as JSON to this file");
  return cmd;
}

int run_check(const CheckArgs& args, int argc, const char* const* argv) {
  const Backend backend = perf::backend_from_string(args.backend);
  if (backend == Backend::cuda && !build_info().cuda_compiled) {
    fmt::print(stderr, "fastattn check: --backend cuda: this build has no CUDA backend\n");
    return kExitUsage;
  }
  if (args.forward_only && args.backward_only) {
    fmt::print(stderr, "fastattn check: --forward-only and --backward-only exclude each other\n");
    return kExitUsage;
  }

  std::vector<harness::Case> cases;
  for (const auto& text : args.case_strings) cases.push_back(harness::parse_case(text));
  if (cases.empty()) {
    harness::CaseLimits limits;
#if defined(FASTATTN_CLI_HAVE_CUDA)
    if (backend == Backend::cuda) {
      limits = cuda_limits(!args.forward_only);
      if (limits.head_dims.empty()) {
        fmt::print(stderr, "fastattn check: --backend cuda: no head dim of this build runs on cuda:0\n");
        return kExitUsage;
      }
    }
#endif
    int count = args.cases;
    if (args.quick) {
      count = std::min(count, 25);
      limits.max_seqlen = 96;
      limits.max_work = 400'000;
    }
    for (int i = 0; i < count; ++i)
      cases.push_back(harness::random_case(case_seed(args.seed, i), limits));
  }
  for (auto& c : cases)
    if (args.threads > 0) c.num_threads = args.threads;

  harness::CheckOptions options;
  options.forward = !args.backward_only;
  options.backward = !args.forward_only;

  const int n = static_cast<int>(cases.size());
  const int width = static_cast<int>(std::to_string(n).size());
  fmt::print("checking backend {} against the float64 oracle: {} case{}, {}\n", to_string(backend),
             n, n == 1 ? "" : "s",
             options.forward && options.backward ? "forward + backward"
                                                 : (options.forward ? "forward" : "backward"));
  std::vector<int> failed;
  Worst worst_overall;
  int worst_index = -1;
  nlohmann::json reports = nlohmann::json::array();
  for (int i = 0; i < n; ++i) {
    const harness::CheckReport r = harness::check_case(cases[i], backend, options);
    const Worst w = worst_tensor(r);
    if (r.pass && (worst_index < 0 || w.ratio > worst_overall.ratio)) {
      worst_overall = w;
      worst_index = i;
    }
    if (!r.pass) failed.push_back(i);
    fmt::print("[{:>{}}/{}] {}  worst {:>5} {:<3}  {}\n", i + 1, width, n, r.pass ? "PASS" : "FAIL",
               fmt::format("{:.2f}", w.ratio), w.tensor, r.c.to_string());
    if (!r.error.empty()) fmt::print("        error: {}\n", r.error);
    if (args.verbose || !r.pass)
      fmt::print("        {}\n        forward: {}\n        backward: {}\n", error_summary(r),
                 r.forward_choice.kernel.empty() ? "-" : r.forward_choice.describe(),
                 r.backward_choice.kernel.empty() ? "-" : r.backward_choice.describe());
    if (args.verbose || !r.pass)
      for (const auto& t : r.tensors) fmt::print("      {}\n", t.to_string());
    std::fflush(stdout);
    reports.push_back(to_json(r));
  }

  fmt::print("\n{} of {} passed", n - static_cast<int>(failed.size()), n);
  if (worst_index >= 0)
    fmt::print("; closest to its bound among passes: case {} ({} at {:.2f} of the bound)",
               worst_index + 1, worst_overall.tensor, worst_overall.ratio);
  fmt::print("\n");
  if (!failed.empty()) {
    fmt::print("FAILED {} case{}; rerun one with:\n  fastattn check --backend {} --case '{}'\n",
               failed.size(), failed.size() == 1 ? "" : "s", args.backend,
               cases[failed.front()].to_string());
  }
  if (!args.json_path.empty()) {
    const perf::CpuFeatures cpu = perf::detect_cpu_features();
    perf::write_json_file(args.json_path, {{"context", perf::run_context(cpu, argc, argv)},
                                           {"backend", to_string(backend)},
                                           {"passed", n - static_cast<int>(failed.size())},
                                           {"failed", failed.size()},
                                           {"cases", reports}});
    fmt::print("wrote {}\n", args.json_path);
  }
  return failed.empty() ? kExitOk : kExitFailed;
}

}  // namespace fastattn::cli
