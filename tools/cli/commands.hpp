// commands.hpp — the `fastattn` subcommands: each registers its options on the CLI11 app and
// runs once parsing succeeded. A run returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace fastattn::cli {

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;  // a check failed, or a benchmark could not run
inline constexpr int kExitUsage = 2;   // bad arguments, or a request this build cannot serve

struct InfoArgs {
  bool no_peaks = false;
  int threads = 0;
  std::string json_path;
};
CLI::App* add_info_command(CLI::App& app, InfoArgs& args);
int run_info(const InfoArgs& args, int argc, const char* const* argv);

struct CheckArgs {
  std::string backend = "cpu";
  int cases = 200;
  std::uint64_t seed = 1;
  bool quick = false;
  std::vector<std::string> case_strings;  // --case "b=1 sq=..." (reruns exactly these)
  bool forward_only = false;
  bool backward_only = false;
  bool verbose = false;
  int threads = 0;
  std::string json_path;
};
CLI::App* add_check_command(CLI::App& app, CheckArgs& args);
int run_check(const CheckArgs& args, int argc, const char* const* argv);

struct BenchArgs {
  std::vector<std::int64_t> batch, seqlen, seqlen_q, seqlen_k, heads, kv_heads, head_dim;
  std::vector<std::string> dtype;
  std::vector<std::string> pass;
  std::vector<int> threads;
  std::vector<std::int64_t> window;  // {left, right}
  bool causal = false;
  float softcap = 0.0f;
  bool kv_cache = false;                // time attention_with_kv_cache's plan/run instead of forward()
  std::vector<std::int64_t> page_size;  // KV-cache rows: 0 contiguous cache, >= 1 paged
  std::string device = "cpu";
  std::string backend = "cpu";
  int warmup = 1;
  int repeats = 5;        // at least
  double min_time = 1.0;  // seconds of timed calls per row, at least
  bool no_peaks = false;
  bool markdown = false;
  std::string json_path;
  bool default_sweep = false;  // set by the command: no shape option was given
  // Set by the command when given: --device cuda has its own defaults (3 warm-up calls, 20
  // timed calls, no minimum time) for the options a caller left alone.
  bool warmup_given = false;
  bool repeats_given = false;
  bool min_time_given = false;
  // --cooperative (bench_coop.cpp): the CPU-GPU cooperative step over a cache split between
  // device and host memory (fastattn/cooperative.hpp, docs/long-context.md).
  bool cooperative = false;
  std::int64_t coop_context = 65536;        // cached tokens
  std::string coop_budget = "16G";          // device budget of the whole model's KV cache
  std::int64_t coop_layers = 1;             // the budget is shared by this many layers
  std::int64_t coop_page_size = 256;
  std::int64_t coop_staging_tokens = 0;  // --staging-tokens: tokens per staging buffer (0: the default)
  std::vector<std::string> coop_strategies;  // auto, device, streamed, cpu, stream_all, cpu_all
  bool coop_check = false;                   // exactness vs float64 and one single-device call
  bool coop_fixed_rates = false;             // --fixed-rates: CooperativeOptions::refine_rates off
};
int run_cooperative_bench(const BenchArgs& args);
CLI::App* add_bench_command(CLI::App& app, BenchArgs& args);
int run_bench(BenchArgs args, int argc, const char* const* argv);

}  // namespace fastattn::cli
