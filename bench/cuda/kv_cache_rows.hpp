// kv_cache_rows.hpp — what kv_cache_bench's rows share: K/V memory that outlives a row, the
// shapes and their JSON fields, the warm timing, and the KV-cache kernel's row (run_paged_row:
// contiguous or paged cache, a forced ring / load / combine, or replayed from a CUDA graph),
// which most modes time. kv_cache_bench.cpp holds forward()'s rows and the modes.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "bench_rows.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "cuda_timing.hpp"
#include "device_array.hpp"

namespace fastattn::bench {

constexpr double kMaxKvBytes = 40e9;  // K+V of one shape; the H200 has 141 GB

// K and V of every row come from two allocations made once, at the first row (each half of
// kMaxKvBytes), as a framework's caching allocator hands a long-lived block out again: with a
// cudaMalloc / cudaFree of up to 20 GB per tensor and row, some rows ran measurably slower in the
// decode sequence than alone (H200, 2026-12-02: b1 kv 128k GQA 64/8, forward() 0.150 ms in the
// sequence, 0.133 ms as the first row of a process, same kernel and launch; b1 kv 32k MHA 0.144
// vs 0.128).
struct KVSlice {
  void* data = nullptr;
  std::size_t bytes = 0;
};
KVSlice kv_slice(int tensor, std::size_t bytes);  // tensor 0: K, 1: V

struct Shape {
  std::int64_t b, sq, sk, h, hkv, d = 128;
};

nlohmann::json shape_row(const char* tag, const Shape& s);

// The one-token decode shapes: query/KV heads 32/8, 32/32, 64/8; batch 1, 16, 64; kv 4k,
// 32k, 128k (in that order).
std::vector<Shape> decode_shapes();

double kv_bytes(const Shape& s);  // K + V, bf16

// ms, min_ms, repeats, kv_bytes, kv_gbs and (hbm_gbs > 0) hbm_fraction into row.
void add_timing(nlohmann::json& row, const perf::cuda::EventTiming& t, const Shape& s, double hbm_gbs);

// The GPU's clocks drop while the host allocates and fills the next shape's tensors: calls for
// kWarmMs first (at least 3), then time_with_events (3 warm-up calls, >= 20 timed, median; fewer,
// >= 5, past max_seconds). sdpa_anchor.py --warm-ms does the same.
constexpr double kWarmMs = 30.0;
perf::cuda::EventTiming time_warm(const std::function<void()>& fn, cudaStream_t stream, double max_seconds);

// How a combine row merges the splits: the plan's, the combine kernel, or the fused combine as
// an eager call runs it (a memset of its counters per call) or as a plan's run does (counters
// zeroed once).
enum class CombineRun { plan_default, separate, fused_eager, fused_planned };

// kv_cache_forward on a cache filled to the end: page_size 0 is the contiguous cache, otherwise
// pages of page_size shuffled through the block table (in order unless shuffled). stages / load
// force the ring / the loads (0 / nullopt: the plan's); graph_calls > 0 times that many runs
// captured in one CUDA graph, per run.
void run_paged_row(const Shape& s, std::int64_t page_size, double hbm_gbs, double max_seconds, cudaStream_t stream,
                   const char* tag = "kv_paged", int stages = 0, CombineRun combine = CombineRun::plan_default,
                   bool shuffled = true, std::optional<cuda::KVLoad> load = std::nullopt, int graph_calls = 0);

}  // namespace fastattn::bench
