// kv_cache_tma.cuh — the KV-cache kernel's TMA loads (KVLoad::tma): one thread issues the box
// loads of a K/V tile, counted on the stage's mbarrier; every thread waits on the barrier.
//
// The kernel lives in the sm80 units, which are compiled for every architecture of
// FASTATTN_CUDA_ARCHS_SM80; these instructions need sm_90, so below it they compile to a trap.
// The plan takes TMA only where the kernel's code on the device was compiled for sm_90 or
// newer (kv_cache_plan.cu: cudaFuncGetAttributes' ptxVersion).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/inference/kv_cache_tma.hpp"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/tma.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FASTATTN_KV_TMA_ARCH 1
#else
#define FASTATTN_KV_TMA_ARCH 0
#endif

namespace fastattn::cuda::kv_tma {

// One arrival (the issuing thread's expect_tx) per phase. Thread 0; a CTA barrier follows.
__device__ __forceinline__ void init_barriers(uint32_t bars, int stages, const KVTensorMaps& maps) {
#if FASTATTN_KV_TMA_ARCH
  for (int s = 0; s < stages; ++s) sm90::mbarrier_init(bars + 8 * s, 1);
  sm90::fence_barrier_init();
  sm90::prefetch_tensor_map(&maps.k);
  sm90::prefetch_tensor_map(&maps.v);
#else
  (void)bars, (void)stages, (void)maps;
  __trap();
#endif
}

// K rows [row0, row0 + rows) of (kv_head, page) into sK, V into sV, kPanels 64-column panels
// each (panel j at + j * panel_bytes), all counted on `bar`. Thread 0.
template <int kPanels>
__device__ __forceinline__ void load_tile(uint32_t bar, uint32_t sK, uint32_t sV, int panel_bytes, int tile_bytes,
                                          const KVTensorMaps& maps, int row0, int kv_head, int page) {
#if FASTATTN_KV_TMA_ARCH
  sm90::mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(tile_bytes));
#pragma unroll
  for (int j = 0; j < kPanels; ++j) {
    sm90::tma_load_4d(sK + j * panel_bytes, &maps.k, bar, 64 * j, row0, kv_head, page);
    sm90::tma_load_4d(sV + j * panel_bytes, &maps.v, bar, 64 * j, row0, kv_head, page);
  }
#else
  (void)bar, (void)sK, (void)sV, (void)panel_bytes, (void)tile_bytes, (void)maps, (void)row0, (void)kv_head, (void)page;
  __trap();
#endif
}

__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
#if FASTATTN_KV_TMA_ARCH
  sm90::mbarrier_wait(bar, parity);
#else
  (void)bar, (void)parity;
  __trap();
#endif
}

// Orders this thread's generic-proxy writes to shared memory (the zeroed tail rows) before a
// later TMA (async-proxy) write to the same bytes (PTX ISA, "Proxies"); a CTA barrier follows.
__device__ __forceinline__ void fence_shared_for_async_proxy() {
#if FASTATTN_KV_TMA_ARCH
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

}  // namespace fastattn::cuda::kv_tma
