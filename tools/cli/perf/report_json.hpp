// report_json.hpp — the JSON every benchmark writes: machine, build, peaks, results.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention_bench.hpp"
#include "cpu_features.hpp"
#include "peaks.hpp"

namespace fastattn::perf {

nlohmann::json to_json(const CpuFeatures& cpu);
nlohmann::json to_json(const Peaks& peaks);
nlohmann::json to_json(const BuildInfo& build);
nlohmann::json to_json(const BenchShape& shape);
nlohmann::json to_json(const KernelChoice& choice);
// With peaks, adds "peak": {"name", "gflops"} and "percent_of_peak" for the result's kernel.
nlohmann::json to_json(const BenchResult& result, const Peaks* peaks = nullptr);

// When, where and how a run happened: UTC time, host, CPU, fastattn build, command line.
nlohmann::json run_context(const CpuFeatures& cpu, int argc, const char* const* argv);

// The 1-minute load average (/proc/loadavg), null when unknown: recorded with results so a
// run on a busy machine says so.
nlohmann::json load_average();

std::string utc_timestamp();  // "2025-01-31T12:34:56Z"
std::string utc_date();       // "2025-01-31"
// A file-name-safe machine name from the CPU model and thread count: "amd-epyc-2t".
std::string machine_slug(const CpuFeatures& cpu, int threads);

// Writes `j` (indented) to `path`, creating parent directories. Throws std::runtime_error.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace fastattn::perf
