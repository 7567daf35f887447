// device_tensors.cpp — host fill, device copies.
#include "device_tensors.hpp"

#include <cuda_runtime.h>

#include "cuda_timing.hpp"

namespace fastattn::perf::cuda {

namespace {

std::size_t byte_size(const TensorView& t) {
  return static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
}

}  // namespace

DeviceAttentionTensors::DeviceAttentionTensors(const BenchShape& shape, bool with_gradients,
                                               std::uint64_t seed) {
  try {
    const AttentionTensors host(shape, with_gradients, seed);
    q = upload(host.q);
    k = upload(host.k);
    v = upload(host.v);
    out = upload(host.out);
    lse = upload(host.lse);
    if (with_gradients) {
      dout = upload(host.dout);
      dq = upload(host.dq);
      dk = upload(host.dk);
      dv = upload(host.dv);
    }
  } catch (...) {
    for (void* p : blocks_) cudaFree(p);
    throw;
  }
}

DeviceAttentionTensors::~DeviceAttentionTensors() {
  for (void* p : blocks_) cudaFree(p);
}

TensorView DeviceAttentionTensors::upload(const TensorView& host) {
  const std::size_t bytes = byte_size(host);
  void* data = nullptr;
  const cudaError_t status = cudaMalloc(&data, bytes > 0 ? bytes : 1);
  if (status == cudaErrorMemoryAllocation)
    throw Error(ErrorCode::out_of_memory,
                "benchmark tensors: cudaMalloc of " + std::to_string(bytes) + " bytes failed");
  check(status, "cudaMalloc");
  blocks_.push_back(data);
  check(cudaMemcpy(data, host.data, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  bytes_ += static_cast<std::int64_t>(bytes);
  TensorView t = host;  // same dtype, shape and (contiguous) strides
  t.data = data;
  t.device = Device::cuda(0);
  return t;
}

std::vector<unsigned char> download(const TensorView& t) {
  std::vector<unsigned char> host(byte_size(t));
  check(cudaMemcpy(host.data(), t.data, host.size(), cudaMemcpyDeviceToHost),
        "cudaMemcpy to host");
  return host;
}

}  // namespace fastattn::perf::cuda
