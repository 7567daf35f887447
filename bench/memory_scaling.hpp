// memory_scaling.hpp — peak resident memory against sequence length, one process per length.
//
// Each measurement runs in a fresh process (this executable re-run with --memory-probe), so
// no allocator cache, pool or earlier, larger run inflates a later, smaller one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attention_bench.hpp"

namespace fastattn::bench {

// The shape measured at each length: batch 1, one head, head_dim 64, causal, f32. Small so
// that 64k tokens stay fast on two cores; linear memory does not depend on the head count.
perf::BenchShape memory_probe_shape(std::int64_t seqlen);

// In the child: allocate the tensors of memory_probe_shape(seqlen), run one forward (and, for
// fastattn, one backward) and print one JSON object on stdout:
//   {"impl", "seqlen", "rss_before_tensors", "tensor_bytes", "peak_forward", "peak_backward"}
// (bytes; peaks are the process high-water mark during that pass). impl: "fastattn" or
// "standard" (the OpenBLAS baseline; forward only).
int run_memory_probe(std::int64_t seqlen, const std::string& impl, int threads);

struct MemoryPoint {
  std::string impl;
  std::int64_t seqlen = 0;
  nlohmann::json probe;  // the child's JSON, or {"error": ...}
};

// In the parent: one child per (impl, seqlen), in order.
std::vector<MemoryPoint> measure_memory_scaling(const std::vector<std::int64_t>& seqlens,
                                                const std::string& impl, int threads);

// Growth of the peak per token from the middle to the last length divided by that from the
// first to the middle length (three lengths): about 1 when memory is linear in seqlen, about
// 4 for 4k/16k/64k when it is quadratic. NaN when a point is missing.
double slope_ratio(const std::vector<MemoryPoint>& points, const char* peak_field);

}  // namespace fastattn::bench
