// mbarrier.cuh — shared-memory transaction barriers (PTX ISA "mbarrier"), sm_90.
//
// A barrier completes a phase when its pending arrival count reaches zero and every byte it was
// told to expect (arrive_expect_tx) has landed (TMA's complete_tx). Waiters name the phase by
// its parity: wait(bar, 0) returns once phase 0 has completed, wait(bar, 1) once phase 1 has.
// Addresses are 32-bit shared-state-space addresses (__cvta_generic_to_shared).
#pragma once

#include <cstdint>

namespace fastattn::cuda::sm90 {

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (TMA) and to the other threads;
// follow with a CTA barrier.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One arrival that also raises the phase's expected transaction count by `bytes`.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Spins (try_wait suspends the thread for a hardware-chosen time per try) until the phase of
// the given parity has completed. The labels are local to the braces, so every inlined copy
// has its own. kClusterAcquire: acquire at cluster scope (the default is the CTA's), for a
// barrier that threads of another CTA of the cluster arrive on (cluster.cuh:
// mbarrier_arrive_cluster's release) before this thread writes memory they read.
#define FASTATTN_SM90_MBARRIER_WAIT_LOOP(SEMANTICS)                                         \
  "{\n"                                                                                    \
  ".reg .pred done;\n"                                                                     \
  "wait_again:\n"                                                                          \
  "mbarrier.try_wait.parity" SEMANTICS ".shared::cta.b64 done, [%0], %1;\n"                \
  "@!done bra wait_again;\n"                                                               \
  "}\n"
template <bool kClusterAcquire = false>
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  if constexpr (kClusterAcquire) {
    asm volatile(FASTATTN_SM90_MBARRIER_WAIT_LOOP(".acquire.cluster")::"r"(bar), "r"(parity) : "memory");
  } else {
    asm volatile(FASTATTN_SM90_MBARRIER_WAIT_LOOP("")::"r"(bar), "r"(parity) : "memory");
  }
}
#undef FASTATTN_SM90_MBARRIER_WAIT_LOOP

}  // namespace fastattn::cuda::sm90
