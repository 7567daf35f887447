// process_memory.cpp — VmRSS / VmHWM parsing and the high-water-mark reset.
#include "process_memory.hpp"

#include <algorithm>
#include <fstream>
#include <string>

namespace fastattn::perf {

namespace {

// Value of a "Key:   1234 kB" line of /proc/self/status, in bytes.
std::int64_t status_kib_field(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(key) + ":";
  while (std::getline(status, line)) {
    if (line.compare(0, prefix.size(), prefix) == 0)
      return std::stoll(line.substr(prefix.size())) * 1024;
  }
  return -1;
}

}  // namespace

std::int64_t current_rss_bytes() { return status_kib_field("VmRSS"); }
std::int64_t peak_rss_bytes() { return status_kib_field("VmHWM"); }

bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  if (!clear_refs) return false;
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

PeakMemoryProbe::PeakMemoryProbe() {
  reset_ok_ = reset_peak_rss();
  baseline_ = reset_ok_ ? current_rss_bytes() : peak_rss_bytes();
}

std::int64_t PeakMemoryProbe::bytes() const {
  return std::max<std::int64_t>(0, peak_rss_bytes() - baseline_);
}

}  // namespace fastattn::perf
