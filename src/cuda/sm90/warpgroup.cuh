// warpgroup.cuh — warp-specialisation primitives of sm_90a: register reallocation between
// warpgroups (setmaxnreg), named barriers among a subset of warps, and the generic -> async
// proxy fence.
#pragma once

#include <cstdint>

namespace fastattn::cuda::sm90 {

constexpr int kWarpgroupThreads = 128;

// setmaxnreg (sm_90a): every thread of the warpgroup executes it; the kernel needs a register
// cap at entry (__launch_bounds__(threads, 1)) and one branch per warpgroup role, else ptxas
// ignores it (warning C7508, an error in this build).
template <int kRegisters>
__device__ __forceinline__ void warpgroup_release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void warpgroup_claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// bar.sync on hardware barrier `id` (1..15; 0 is __syncthreads) among `threads` threads (a
// multiple of 32): orders ordinary shared-memory accesses among those warps only.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Orders this thread's ordinary shared-memory stores before later async-proxy accesses (wgmma
// operand reads, TMA stores) of the same memory; put it before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// stmatrix.x4 (sm_90): four 8x8 16-bit matrices from registers to shared memory; register i is
// lane l's pair (row l / 4, columns 2 (l % 4), +1) of matrix i, and lanes 8i..8i+7 give the row
// addresses of matrix i.
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace fastattn::cuda::sm90
