// rates_cuda.cu — the GPU side of measure_cooperative_rates (rates.cpp): PCIe host-to-device
// from pinned memory, the host read rate while such a copy runs (the CPU part competes with the
// DMA for host memory), HBM through a device-to-device copy (read + write bytes), and the GPU's
// attention FLOP rate on a 4096 x 4096 bf16 forward (32 heads over 8 KV heads, d 128).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"

namespace fastattn::coop {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(ErrorCode::device_error, std::string("measure_cooperative_rates: ") + what + ": " + cudaGetErrorString(e));
  }
}

template <class Fn>
double median_ms(cudaStream_t s, int repeats, Fn&& fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  fn();
  std::vector<float> t;
  for (int i = 0; i < repeats; ++i) {
    check(cudaEventRecord(a, s), "event");
    fn();
    check(cudaEventRecord(b, s), "event");
    check(cudaEventSynchronize(b), "event");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "event");
    t.push_back(ms);
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

CooperativeRates measure_rates_cuda(int ordinal, int cpu_threads) {
  CooperativeRates r;
  check(cudaSetDevice(ordinal), "cudaSetDevice");
  const std::size_t bytes = std::size_t{256} << 20;
  void* host = nullptr;
  void* dev = nullptr;
  void* dev2 = nullptr;
  check(cudaHostAlloc(&host, bytes, cudaHostAllocPortable), "cudaHostAlloc");
  std::vector<std::uint64_t> other(bytes / 8, 1);  // what the CPU reads during the DMA
  cudaStream_t s = nullptr;
  bool copies_ran_throughout = false;
  try {
    check(cudaMalloc(&dev, bytes), "cudaMalloc");
    check(cudaMalloc(&dev2, bytes), "cudaMalloc");
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    std::fill_n(static_cast<char*>(host), bytes, 1);
    const double pcie_ms = median_ms(s, 3, [&] { check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "copy"); });
    r.pcie_h2d = static_cast<double>(bytes) / (pcie_ms * 1e-3);
    // The host read and the CPU part's decode call are timed while copies run: a step's CPU part
    // runs beside its streamed part's copies, and reads less then than alone (docs/long-context.md,
    // "Measure"). Enough copies for ~0.3 s at the rate just measured (the read of 256 MiB and
    // >= 50 ms of decode calls take well under that); whether they still ran when the decode
    // calls ended is checked and said in the source.
    CpuDecodeProbe decode(cpu_threads);
    (void)measure_host_read(other.data(), bytes, cpu_threads);  // warm
    const int copies = std::clamp(static_cast<int>(std::ceil(300.0 / std::max(pcie_ms, 1e-3))), 8, 256);
    for (int i = 0; i < copies; ++i) check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s), "copy");
    r.host_read_during_dma = measure_host_read(other.data(), bytes, cpu_threads);
    r.cpu_attention = decode.rate(5, 0.05);
    copies_ran_throughout = cudaStreamQuery(s) == cudaErrorNotReady;
    check(cudaStreamSynchronize(s), "copy");
    const double hbm_ms = median_ms(s, 5, [&] { check(cudaMemcpyAsync(dev2, dev, bytes, cudaMemcpyDeviceToDevice, s), "copy"); });
    r.gpu_hbm = 2.0 * static_cast<double>(bytes) / (hbm_ms * 1e-3);
    // Attention FLOPs: q [1, 4096, 32, 128], k = v [1, 4096, 8, 128] bf16 from the copy buffers.
    try {
      const std::int64_t n = 4096, h = 32, kvh = 8, d = 128;
      char* base = static_cast<char*>(dev);
      const TensorView q = make_tensor(base, DType::bf16, {1, n, h, d}, Device::cuda(ordinal));
      const TensorView k = make_tensor(base + n * h * d * 2, DType::bf16, {1, n, kvh, d}, Device::cuda(ordinal));
      const TensorView o = make_tensor(dev2, DType::bf16, {1, n, h, d}, Device::cuda(ordinal));
      check(cudaMemsetAsync(dev, 0x3c, static_cast<std::size_t>(2 * n * h * d), s), "memset");  // bf16 ~0.011: finite
      AttentionOptions a;
      a.backend = Backend::cuda;
      a.cuda_stream = s;
      const double ms = median_ms(s, 3, [&] { forward(q, k, k, o, std::nullopt, a); });
      r.gpu_attention_flops = 4.0 * static_cast<double>(n * n * h * d) / (ms * 1e-3);
    } catch (const Error&) {
      r.gpu_attention_flops = 0;  // no kernel for it in this build: no compute bound in the model
    }
  } catch (...) {
    if (s != nullptr) (void)cudaStreamDestroy(s);
    (void)cudaFree(dev);
    (void)cudaFree(dev2);
    (void)cudaFreeHost(host);
    throw;
  }
  (void)cudaStreamDestroy(s);
  (void)cudaFree(dev);
  (void)cudaFree(dev2);
  (void)cudaFreeHost(host);
  measure_cpu_flops(cpu_threads, r);
  r.source = std::string("measured (pinned copy 256 MiB, host read and CPU decode during host-to-device copies") +
             (copies_ran_throughout ? "" : ", which ended before the decode calls did") + ", device copy)";
  return r;
}

}  // namespace fastattn::coop
