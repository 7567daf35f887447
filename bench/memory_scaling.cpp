// memory_scaling.cpp — the --memory-probe child and the parent that spawns it.
#include "memory_scaling.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "process_memory.hpp"
#include "standard_attention.hpp"

namespace fastattn::bench {

perf::BenchShape memory_probe_shape(std::int64_t seqlen) {
  perf::BenchShape s;
  s.batch = 1;
  s.heads = s.kv_heads = 1;
  s.head_dim = 64;
  s.seqlen_q = s.seqlen_k = seqlen;
  s.causal = true;
  s.dtype = DType::f32;
  return s;
}

int run_memory_probe(std::int64_t seqlen, const std::string& impl, int threads) {
  const perf::BenchShape shape = memory_probe_shape(seqlen);
  nlohmann::json j = {{"impl", impl}, {"seqlen", seqlen}};
  j["rss_before_tensors"] = perf::current_rss_bytes();
  const bool fastattn_impl = impl == "fastattn";
  perf::AttentionTensors t(shape, fastattn_impl);
  j["tensor_bytes"] = t.bytes();
  j["rss_after_tensors"] = perf::current_rss_bytes();
  j["peak_reset_ok"] = perf::reset_peak_rss();
  if (fastattn_impl) {
    const AttentionOptions o = perf::options_for(shape, Backend::cpu, threads);
    fastattn::forward(t.q, t.k, t.v, t.out, t.lse, o);
    j["peak_forward"] = perf::peak_rss_bytes();
    perf::reset_peak_rss();
    try {  // a failing backward must not lose the forward's measurement
      fastattn::backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv, o);
      j["peak_backward"] = perf::peak_rss_bytes();
    } catch (const std::exception& e) {
      j["error"] = std::string("backward: ") + e.what();
    }
  } else {
    set_baseline_threads(threads);
    standard_forward(shape, t);
    j["peak_forward"] = perf::peak_rss_bytes();
  }
  fmt::print("{}\n", j.dump());
  return 0;
}

namespace {

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

}  // namespace

std::vector<MemoryPoint> measure_memory_scaling(const std::vector<std::int64_t>& seqlens,
                                                const std::string& impl, int threads) {
  std::vector<MemoryPoint> points;
  const std::string exe = self_executable();
  for (const std::int64_t seqlen : seqlens) {
    MemoryPoint p{impl, seqlen, nullptr};
    const std::string command = fmt::format("'{}' --memory-probe {} --memory-impl {} --threads {}",
                                            exe, seqlen, impl, threads);
    std::string output;
    if (FILE* pipe = popen(command.c_str(), "r")) {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, pipe)) output += buf;
      const int status = pclose(pipe);
      try {
        p.probe = nlohmann::json::parse(output);
      } catch (const nlohmann::json::exception&) {
        p.probe = {{"error", fmt::format("probe exited with status {}: {}", status, output)}};
      }
    } else {
      p.probe = {{"error", "could not start " + command}};
    }
    points.push_back(p);
  }
  return points;
}

double slope_ratio(const std::vector<MemoryPoint>& points, const char* peak_field) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (points.size() != 3) return nan;
  double peak[3], len[3];
  for (int i = 0; i < 3; ++i) {
    const auto& j = points[static_cast<std::size_t>(i)].probe;
    if (!j.contains(peak_field) || !j[peak_field].is_number()) return nan;
    peak[i] = j[peak_field].get<double>();
    len[i] = static_cast<double>(points[static_cast<std::size_t>(i)].seqlen);
  }
  const double first = (peak[1] - peak[0]) / (len[1] - len[0]);
  const double second = (peak[2] - peak[1]) / (len[2] - len[1]);
  return first > 0 ? second / first : nan;
}

}  // namespace fastattn::bench
