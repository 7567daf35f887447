// tma.cuh — the Tensor Memory Accelerator's bulk tensor loads (PTX cp.async.bulk.tensor), sm_90.
//
// One thread issues a load of a whole box (the tensor map's box size) from global to shared
// memory; its bytes are counted against an mbarrier (complete_tx), so consumers wait on the
// barrier, not on the copy. Elements of the box outside the tensor's bounds are filled with
// zeros and still counted, so the expected byte count is always the full box. The tensor map
// (tensor_map.hpp builds it on the host) is a __grid_constant__ kernel parameter; its generic
// address is what the instruction takes.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fastattn::cuda::sm90 {

// Coordinates are in elements, innermost dimension first.
__device__ __forceinline__ void tma_load_4d(uint32_t smem_dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The same box into the same shared-memory offset of every CTA of the cluster named in
// `cta_mask` (bit i: rank i), each CTA's bytes counted on the mbarrier at offset `bar` of that
// CTA (multicast; sm_90). Each receiving CTA's barrier must expect the bytes (arrive_expect_tx
// by its own producer); the complete_tx may reach it before that arrival, which the barrier's
// transaction count allows within a phase.
__device__ __forceinline__ void tma_load_4d_multicast(uint32_t smem_dst, const CUtensorMap* map, uint32_t bar,
                                                      uint16_t cta_mask, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(smem_dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "h"(cta_mask), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

// The other direction: a box from shared memory to global memory, in the issuing thread's bulk
// async-group (bulk_reduce.cuh: bulk_commit_group, bulk_wait_group_read before the shared memory
// is written again, bulk_wait_group before the CTA exits). Elements outside the tensor's bounds
// are not written. The shared memory must be made visible to the async proxy first
// (fence.proxy.async.shared::cta, warpgroup.cuh: fence_proxy_async_shared).
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, uint32_t smem_src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(smem_src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}

// Pulls the tensor map into the TMA unit's cache before the first load that uses it.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace fastattn::cuda::sm90
