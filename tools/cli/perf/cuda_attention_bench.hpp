// cuda_attention_bench.hpp — one attention shape timed on the GPU with CUDA events: the CUDA
// counterpart of run_attention_bench (attention_bench.hpp), for `fastattn bench --device cuda`
// and bench/cuda/cuda_bench. Built only with CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "attention_bench.hpp"
#include "cuda_timing.hpp"
#include "device_tensors.hpp"

namespace fastattn::perf::cuda {

struct CudaBenchResult {
  BenchResult result;             // timing in seconds, GFLOP/s by pass_flops, kernel choices
  EventTiming events;             // the same timing in milliseconds
  std::size_t pool_used_high = 0;      // scratch fastattn drew from the default pool, at most
  std::size_t pool_reserved_high = 0;  // what the pool reserved from the device, at most
  long long free_drop = 0;             // device free bytes lost during the runs (cudaMemGetInfo)
};

// pass: forward (timed forward), backward (one untimed forward for out/lse, then timed
// backward), forward_backward (timed forward followed by backward). `options` carries the
// flags a caller wants beyond the shape (e.g. deterministic); backend is set to cuda.
CudaBenchResult run_cuda_attention_bench(const BenchShape& shape, Pass pass,
                                         const AttentionOptions& options,
                                         const EventTimingOptions& timing,
                                         std::uint64_t seed = 1);

// The same on tensors the caller made (with gradients unless pass is forward), so several
// passes over one shape fill and upload the inputs once; `shape` must be the tensors' shape.
CudaBenchResult run_cuda_attention_bench(DeviceAttentionTensors& tensors, const BenchShape& shape,
                                         Pass pass, const AttentionOptions& options,
                                         const EventTimingOptions& timing);

}  // namespace fastattn::perf::cuda
