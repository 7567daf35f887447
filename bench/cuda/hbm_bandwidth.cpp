// hbm_bandwidth.cpp — D2D cudaMemcpy timed with CUDA events.
#include "hbm_bandwidth.hpp"

#include <cuda_runtime.h>

#include "cuda_timing.hpp"

namespace fastattn::bench {

CopyBandwidth measure_copy_bandwidth(std::size_t copy_bytes, int repeats) {
  using perf::cuda::check;
  void* src = nullptr;
  void* dst = nullptr;
  check(cudaMalloc(&src, copy_bytes), "cudaMalloc (bandwidth source)");
  if (const cudaError_t e = cudaMalloc(&dst, copy_bytes); e != cudaSuccess) {
    cudaFree(src);
    check(e, "cudaMalloc (bandwidth destination)");
  }
  CopyBandwidth r;
  try {
    // Pages are touched before timing, so the copies measure steady-state bandwidth.
    check(cudaMemset(src, 1, copy_bytes), "cudaMemset");
    check(cudaMemset(dst, 0, copy_bytes), "cudaMemset");
    perf::cuda::EventTimingOptions timing;
    timing.warmup = 2;
    timing.min_repeats = repeats;
    const perf::cuda::EventTiming t = perf::cuda::time_with_events(
        [&] { check(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, nullptr),
                    "cudaMemcpyAsync"); },
        nullptr, timing);
    r.copy_bytes = copy_bytes;
    r.median_ms = t.median_ms;
    r.repeats = t.repeats;
    r.gbs = 2.0 * static_cast<double>(copy_bytes) / (t.median_ms / 1e3) / 1e9;
  } catch (...) {
    cudaFree(src);
    cudaFree(dst);
    throw;
  }
  cudaFree(src);
  cudaFree(dst);
  return r;
}

}  // namespace fastattn::bench
