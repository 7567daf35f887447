// kv_cache_host.hpp — the host side of CUDA KV-cache calls that is not the kernels'
// (kv_cache.hpp is): reading seqlens / block_table back for an eager call's value checks, the
// eager call's scratch, and the device memory a KVCachePlan owns. Plain C++ (no CUDA headers),
// compiled only with CUDA (kv_cache_host.cu); the API layer (src/api/kv_cache.cpp) calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/inference/kv_cache.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn::cuda {

// Host copies of cache.seqlens (batch entries) and cache.block_table (its whole extent: row b
// at b * p.block_table_stride), copied on p.attn.cuda_stream, which this synchronises (work
// queued before the call that writes them is seen).
struct KVCacheIndices {
  std::vector<std::int32_t> seqlens;
  std::vector<std::int32_t> block_table;  // empty for a contiguous cache
};
KVCacheIndices read_kv_cache_indices(const KVCacheProblem& p);

// An eager call: scratch from fastattn's stream-ordered pool (or options.workspace), then
// kv_cache_forward, on p's device and stream.
void kv_cache_eager(const KVCacheProblem& p, const KVCacheLaunch& launch);

// A plan's run: kv_cache_forward on the plan's scratch, on p's device and stream.
void kv_cache_run(const KVCacheProblem& p, const KVCacheLaunch& launch, void* scratch);

// Device memory a KVCachePlan owns for its life: cudaMalloc at construction (before any graph
// capture), cudaFree at destruction. bytes 0: none.
class KVCachePlanScratch {
 public:
  KVCachePlanScratch(int device, std::size_t bytes);
  ~KVCachePlanScratch();
  KVCachePlanScratch(const KVCachePlanScratch&) = delete;
  KVCachePlanScratch& operator=(const KVCachePlanScratch&) = delete;
  void* data() const { return data_; }

 private:
  int device_ = 0;
  void* data_ = nullptr;
};

}  // namespace fastattn::cuda
