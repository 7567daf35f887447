// hbm_bandwidth.hpp — the device memory bandwidth the split-KV bar is judged against, measured
// in the same run: a device-to-device cudaMemcpy of a large buffer, read + write bytes counted.
#pragma once

#include <cstddef>

namespace fastattn::bench {

struct CopyBandwidth {
  std::size_t copy_bytes = 0;  // bytes of one cudaMemcpy (each is read once and written once)
  double median_ms = 0;
  int repeats = 0;
  double gbs = 0;  // 2 * copy_bytes / median time, in 1e9 bytes per second
};

// Throws fastattn::Error when the buffers cannot be allocated or a copy fails.
CopyBandwidth measure_copy_bandwidth(std::size_t copy_bytes, int repeats);

}  // namespace fastattn::bench
