// main.cpp — `fastattn`: info | check | bench. See docs/cli.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "commands.hpp"
#include "fastattn/fastattn.hpp"

int main(int argc, char** argv) {
  using namespace fastattn::cli;
  CLI::App app{
      "fastattn: exact memory-efficient attention - machine info, correctness checks "
      "and benchmarks",
      "fastattn"};
  app.set_version_flag("--version", FASTATTN_VERSION_STRING);
  app.require_subcommand(1);

  InfoArgs info_args;
  CheckArgs check_args;
  BenchArgs bench_args;
  CLI::App* info = add_info_command(app, info_args);
  CLI::App* check = add_check_command(app, check_args);
  CLI::App* bench = add_bench_command(app, bench_args);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }

  const char* const* args = argv;
  try {
    if (*info) return run_info(info_args, argc, args);
    if (*check) return run_check(check_args, argc, args);
    if (*bench) return run_bench(bench_args, argc, args);
  } catch (const fastattn::Error& e) {
    fmt::print(stderr, "fastattn: error ({}): {}\n", fastattn::to_string(e.code()), e.what());
    return e.code() == fastattn::ErrorCode::invalid_argument ||
                   e.code() == fastattn::ErrorCode::unsupported
               ? kExitUsage
               : kExitFailed;
  } catch (const std::exception& e) {
    fmt::print(stderr, "fastattn: error: {}\n", e.what());
    return kExitFailed;
  }
  return kExitUsage;
}
