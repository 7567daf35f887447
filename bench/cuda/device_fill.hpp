// device_fill.hpp — random bf16 tensors filled on the device (a counter hash, values in
// [-1, 1), never all zero), so multi-GB benchmark caches cost no host time or upload.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fastattn::bench {

// Fills `count` bf16 elements at `data` on `stream`; throws fastattn::Error on a CUDA error.
void fill_random_bf16(void* data, std::size_t count, std::uint64_t seed, cudaStream_t stream);

}  // namespace fastattn::bench
