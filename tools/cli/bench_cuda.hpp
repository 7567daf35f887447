// bench_cuda.hpp — `fastattn bench --device cuda`: the rows of bench.cpp timed on the GPU with
// CUDA events. Compiled only in builds with the CUDA backend (FASTATTN_CLI_HAVE_CUDA); this
// header itself needs no CUDA headers.
#pragma once

#include <vector>

#include "attention_bench.hpp"
#include "commands.hpp"

namespace fastattn::cli {

struct CudaBenchRow {
  perf::BenchShape shape;
  perf::Pass pass = perf::Pass::forward;
};

// Prints the table (or markdown), writes --json; returns an exit code like run_bench.
int run_bench_cuda(const BenchArgs& args, const std::vector<CudaBenchRow>& rows, int argc,
                   const char* const* argv);

}  // namespace fastattn::cli
