// bulk_reduce.cuh — the TMA unit's bulk reduce-add from shared to global memory (PTX
// cp.reduce.async.bulk, sm_90), its bulk-group completion, and the gpu-scope acquire/release
// pair of the ordered semaphores (deterministic dQ, flash_bwd_sm90/dq_writer.cuh).
//
// A bulk reduce-add adds `bytes` (a multiple of 16; both addresses 16-byte aligned) of fp32
// values from shared memory into global memory element-wise, atomically per element, in the
// async proxy. The issuing thread commits its bulk copies as a group and waits for them:
// .read only until the shared-memory source may be overwritten, without it until the adds are
// performed in global memory.
#pragma once

#include <cstdint>

namespace fastattn::cuda::sm90 {

__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t smem_src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(smem_src), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most kPending of this thread's bulk groups still read their shared source.
template <int kPending>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Waits until at most kPending of this thread's bulk groups are not complete (writes performed).
template <int kPending>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Orders this thread's global-memory accesses in the generic proxy with its accesses in the
// async proxy (bulk reduce-adds) across a semaphore hand-off.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The semaphore pair: a waiter spins on an acquire load until the count reaches its turn; the
// releaser, after its adds (and a barrier that orders its CTA's adds before it), publishes the
// next turn with a release reduction (PTX memory model: the release and the acquire that reads
// it synchronise, so the adds before the release happen before the adds after the acquire).
__device__ __forceinline__ int load_acquire_gpu(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void add_release_gpu(int* p, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(value) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

}  // namespace fastattn::cuda::sm90
