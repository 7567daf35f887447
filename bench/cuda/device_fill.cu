// device_fill.cu — see device_fill.hpp.
#include "device_fill.hpp"

#include <cuda_bf16.h>

#include "cuda_timing.hpp"

namespace fastattn::bench {
namespace {

__global__ void fill_random_bf16_kernel(__nv_bfloat16* data, std::size_t count, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;  // splitmix64 of the element index
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    data[i] = __float2bfloat16(static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f);
  }
}

}  // namespace

void fill_random_bf16(void* data, std::size_t count, std::uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_random_bf16_kernel<<<4096, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, seed);
  perf::cuda::check(cudaGetLastError(), "fill_random_bf16_kernel");
  perf::cuda::check(cudaStreamSynchronize(stream), "fill_random_bf16_kernel");
}

}  // namespace fastattn::bench
