// device_tensors.hpp — the tensors of one benchmark shape in GPU memory, with the same values
// as the host AttentionTensors (same seed, same counter-based fill). Built only with CUDA.
#pragma once

#include <cstdint>
#include <vector>

#include "attention_bench.hpp"

namespace fastattn::perf::cuda {

class DeviceAttentionTensors {
 public:
  // Fills on the host (AttentionTensors) and copies; gradients only when asked for.
  DeviceAttentionTensors(const BenchShape& shape, bool with_gradients, std::uint64_t seed = 1);
  ~DeviceAttentionTensors();
  DeviceAttentionTensors(const DeviceAttentionTensors&) = delete;
  DeviceAttentionTensors& operator=(const DeviceAttentionTensors&) = delete;

  TensorView q, k, v, out, lse, dout, dq, dk, dv;
  std::int64_t bytes() const { return bytes_; }  // device bytes of all the tensors above

 private:
  TensorView upload(const TensorView& host);
  std::vector<void*> blocks_;
  std::int64_t bytes_ = 0;
};

// The bytes of a device tensor (contiguous), copied to the host.
std::vector<unsigned char> download(const TensorView& t);

}  // namespace fastattn::perf::cuda
