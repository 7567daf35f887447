// process_memory.hpp — resident memory of this process, from /proc/self/status (Linux).
#pragma once

#include <cstdint>

namespace fastattn::perf {

std::int64_t current_rss_bytes();  // VmRSS; -1 when unknown
std::int64_t peak_rss_bytes();     // VmHWM (high-water mark); -1 when unknown

// Resets the high-water mark to the current RSS (writes "5" to /proc/self/clear_refs, Linux
// >= 4.0), so peak_rss_bytes() afterwards is the peak of what follows. False when not allowed;
// the peak then stays the process-lifetime peak.
bool reset_peak_rss();

// Measures the extra resident memory of a region: construct, run the region, read bytes().
class PeakMemoryProbe {
 public:
  PeakMemoryProbe();
  // Peak RSS during the region minus RSS at construction (>= 0). When the high-water mark
  // could not be reset this is the growth of the process-lifetime peak.
  std::int64_t bytes() const;
  bool exact() const { return reset_ok_; }

 private:
  bool reset_ok_ = false;
  std::int64_t baseline_ = 0;
};

}  // namespace fastattn::perf
