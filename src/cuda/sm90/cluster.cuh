// cluster.cuh — thread block clusters (sm_90): a CTA's rank in its cluster, the cluster-wide
// barrier, and arrivals on an mbarrier of another CTA of the cluster (distributed shared
// memory, PTX ISA "mapa" and "mbarrier.arrive ... shared::cluster").
#pragma once

#include <cstdint>

namespace fastattn::cuda::sm90 {

// This CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

// Every thread of every CTA of the cluster (aligned: all threads of a warp together): what each
// CTA wrote before it (its barriers' initialisation included, fence_barrier_init) is visible to
// the others after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// One arrival on the mbarrier at shared address `bar` (this CTA's address of it) in CTA `cta` of
// the cluster, which may be this one: mapa gives the cluster-window address of the same offset
// there. Release at cluster scope: this thread's earlier memory accesses (and the wgmma reads it
// waited for) are ordered before the arrival that the other CTA's waiter observes.
__device__ __forceinline__ void mbarrier_arrive_cluster(uint32_t bar, uint32_t cta) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(cta)
      : "memory");
}

}  // namespace fastattn::cuda::sm90
