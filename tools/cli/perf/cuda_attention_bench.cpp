// cuda_attention_bench.cpp — device tensors, event timing and pool probes for one shape.
#include "cuda_attention_bench.hpp"

namespace fastattn::perf::cuda {

CudaBenchResult run_cuda_attention_bench(const BenchShape& shape, Pass pass,
                                         const AttentionOptions& options,
                                         const EventTimingOptions& timing, std::uint64_t seed) {
  DeviceAttentionTensors tensors(shape, pass != Pass::forward, seed);
  return run_cuda_attention_bench(tensors, shape, pass, options, timing);
}

CudaBenchResult run_cuda_attention_bench(DeviceAttentionTensors& t, const BenchShape& shape,
                                         Pass pass, const AttentionOptions& base_options,
                                         const EventTimingOptions& timing) {
  if (pass != Pass::forward && t.dq.data == nullptr)
    throw Error(ErrorCode::invalid_argument,
                "run_cuda_attention_bench: a backward pass needs tensors made with gradients");
  CudaBenchResult r;
  BenchResult& b = r.result;
  b.shape = shape;
  b.pass = pass;
  b.backend = Backend::cuda;
  b.tensor_bytes = t.bytes();

  AttentionOptions options = base_options;
  options.backend = Backend::cuda;
  options.causal = shape.causal;
  options.window_left = shape.window_left;
  options.window_right = shape.window_right;
  options.softcap = shape.softcap;
  const auto stream = static_cast<cudaStream_t>(options.cuda_stream);

  auto run_forward = [&] { return fastattn::forward(t.q, t.k, t.v, t.out, t.lse, options); };
  auto run_backward = [&] {
    return fastattn::backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv, options);
  };

  // The probe starts before the first call, so the pool's growth for scratch is counted.
  check(cudaDeviceSynchronize(), "before the runs");
  const DeviceMemoryProbe memory;
  // The first call of each direction reports the kernel; it counts as a warm-up call.
  EventTimingOptions rest = timing;
  rest.warmup = timing.warmup > 0 ? timing.warmup - 1 : 0;
  switch (pass) {
    case Pass::forward:
      b.kernel = run_forward();
      r.events = time_with_events([&] { run_forward(); }, stream, rest);
      break;
    case Pass::backward:
      run_forward();
      b.kernel = run_backward();
      r.events = time_with_events([&] { run_backward(); }, stream, rest);
      break;
    case Pass::forward_backward:
      b.kernel = run_forward();
      b.kernel_backward = run_backward();
      r.events = time_with_events(
          [&] {
            run_forward();
            run_backward();
          },
          stream, rest);
      break;
  }
  check(cudaDeviceSynchronize(), "after the runs");
  r.pool_used_high = memory.pool_used_high();
  r.pool_reserved_high = memory.pool_reserved_high();
  r.free_drop = memory.free_drop();

  b.threads = 0;
  b.timing.median_s = r.events.median_ms / 1e3;
  b.timing.min_s = r.events.min_ms / 1e3;
  b.timing.mean_s = r.events.mean_ms / 1e3;
  b.timing.repeats = r.events.repeats;
  b.gflops = pass_flops(shape, pass) / b.timing.median_s / 1e9;
  b.peak_extra_bytes = static_cast<std::int64_t>(r.pool_used_high);
  b.peak_exact = true;
  return r;
}

}  // namespace fastattn::perf::cuda
