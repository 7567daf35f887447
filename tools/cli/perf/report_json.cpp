// report_json.cpp — JSON conversions and the run's context.
#include "report_json.hpp"

#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace fastattn::perf {

namespace {

template <class T>
nlohmann::json optional_json(const std::optional<T>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::string format_utc(const char* pattern) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, pattern, &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

nlohmann::json to_json(const CpuFeatures& cpu) {
  return {{"vendor", cpu.vendor},
          {"model", cpu.model},
          {"logical_cpus", cpu.logical_cpus},
          {"last_level_cache_bytes", cpu.last_level_cache_bytes},
          {"features", cpu.present()}};
}

nlohmann::json to_json(const Peaks& peaks) {
  return {{"threads", peaks.threads},
          {"fp32_fma_avx2_gflops", optional_json(peaks.fma_avx2_gflops)},
          {"fp32_fma_avx512_gflops", optional_json(peaks.fma_avx512_gflops)},
          {"bf16_dot_gflops", optional_json(peaks.bf16_dot_gflops)},
          {"mem_read_gbs", optional_json(peaks.mem_read_gbs)}};
}

nlohmann::json to_json(const BuildInfo& build) {
  return {{"version", build.version},
          {"cuda_compiled", build.cuda_compiled},
          {"cpu_isas_compiled", build.cpu_isas_compiled},
          {"cpu_isa_selected", build.cpu_isa_selected},
          {"cuda_archs_compiled", build.cuda_archs_compiled}};
}

nlohmann::json to_json(const BenchShape& s) {
  return {{"batch", s.batch},
          {"seqlen_q", s.seqlen_q},
          {"seqlen_k", s.seqlen_k},
          {"heads", s.heads},
          {"kv_heads", s.kv_heads},
          {"head_dim", s.head_dim},
          {"dtype", to_string(s.dtype)},
          {"causal", s.causal},
          {"window_left", s.window_left},
          {"window_right", s.window_right},
          {"softcap", s.softcap},
          {"kv_page_size", s.kv_page_size},
          {"label", s.label()}};
}

nlohmann::json to_json(const KernelChoice& c) {
  return {{"backend", to_string(c.backend)},
          {"kernel", c.kernel},
          {"isa", c.isa},
          {"block_q", c.block_q},
          {"block_k", c.block_k},
          {"num_threads", c.num_threads},
          {"workspace_bytes", c.workspace_bytes},
          {"reason", c.reason},
          {"describe", c.describe()}};
}

nlohmann::json to_json(const BenchResult& r, const Peaks* peaks) {
  nlohmann::json j = {{"shape", to_json(r.shape)},
                      {"pass", to_string(r.pass)},
                      {"backend", to_string(r.backend)},
                      {"threads", r.threads},
                      {"median_s", r.timing.median_s},
                      {"min_s", r.timing.min_s},
                      {"mean_s", r.timing.mean_s},
                      {"repeats", r.timing.repeats},
                      {"flops", pass_flops(r.shape, r.pass)},
                      {"gflops", r.gflops},
                      {"tensor_bytes", r.tensor_bytes},
                      {"peak_extra_bytes", r.peak_extra_bytes},
                      {"peak_extra_exact", r.peak_exact},
                      {"kernel", to_json(r.kernel)}};
  if (r.kernel_backward) j["kernel_backward"] = to_json(*r.kernel_backward);
  if (peaks) {
    const PeakRef ref = peak_for(*peaks, r.shape.dtype, r.kernel.isa);
    j["peak"] = {{"name", ref.name}, {"gflops", ref.gflops}};
    j["percent_of_peak"] =
        ref.gflops > 0 ? nlohmann::json(100.0 * r.gflops / ref.gflops) : nlohmann::json(nullptr);
  }
  return j;
}

nlohmann::json run_context(const CpuFeatures& cpu, int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  return {{"timestamp_utc", utc_timestamp()},
          {"host", host_name()},
          {"cpu", to_json(cpu)},
          {"build", to_json(fastattn::build_info())},
          {"command", args},
          {"load_average_1min", load_average()}};
}

nlohmann::json load_average() {
  std::ifstream f("/proc/loadavg");
  double one_minute = 0.0;
  if (f >> one_minute) return one_minute;
  return nullptr;
}

std::string utc_timestamp() { return format_utc("%Y-%m-%dT%H:%M:%SZ"); }
std::string utc_date() { return format_utc("%Y-%m-%d"); }

std::string machine_slug(const CpuFeatures& cpu, int threads) {
  // "Intel(R) Xeon(R) Platinum 8480+ CPU @ 2.0GHz" -> "intel-xeon-platinum-8480";
  // "AMD EPYC 7B13 64-Core Processor" -> "amd-epyc-7b13". Trademarks and the tail are dropped.
  std::vector<std::string> words;
  std::string word;
  auto flush = [&] {
    if (word == "r" || word == "tm" || word == "cpu" || word == "processor") word.clear();
    if (!word.empty() && words.size() < 4) words.push_back(word);
    word.clear();
  };
  for (const char c : cpu.model) {
    if (c == '@') break;
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (c == '-' && !word.empty() && std::isdigit(static_cast<unsigned char>(word[0]))) {
      word.clear();  // "64-Core": a core count, not a model name
      break;
    } else {
      flush();
    }
  }
  flush();
  std::string slug;
  for (const auto& w : words) slug += (slug.empty() ? "" : "-") + w;
  return (slug.empty() ? std::string("cpu") : slug) + "-" + std::to_string(threads) + "t";
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << j.dump(2) << "\n";
  if (!f) throw std::runtime_error("error writing " + path);
}

}  // namespace fastattn::perf
