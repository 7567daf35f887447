// work_slot.cuh — where the sm90 backward's MMA warpgroups keep the CTA's work
// (Sm90BackwardWork: tile, query-block range, full-tile range, lengths, mask) across the steps
// (FASTATTN_SM90_BWD_WORK_IN_SMEM, a build knob for the A/B; default 0):
//   0  recomputed from blockIdx twice a step (before the GEMMs and for the dQ output): ~235 of
//      the ~1140 SASS instructions a warp issues per full step at d = 128 (64-bit divisions
//      of the tile decomposition and the query-block range), where two MMA warps share a
//      scheduler and the step's GEMMs take ~2560 cycles: the issue slots are nearly full;
//   1  computed once by thread 0 of each MMA warpgroup into shared memory (work_slot) and read
//      from there at each use (ld.shared, reloaded after every barrier), so no register holds
//      it across the loop (kept across the loop in registers, ptxas spilled at d = 128), and
//      the steps' (head, query block) come from running counters (Sm90StepCursor). SASS: the
//      atomic_tiles step loop 27% (d = 64) / 24% (d = 128) fewer static instructions; with dK
//      last since the guard around the step loop (kernel.cuh).
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"

#ifndef FASTATTN_SM90_BWD_WORK_IN_SMEM
#define FASTATTN_SM90_BWD_WORK_IN_SMEM 0
#endif

namespace fastattn::cuda {

constexpr bool kSm90BwdWorkInSmem = FASTATTN_SM90_BWD_WORK_IN_SMEM != 0;

// Work in shared memory: MMA warpgroup wg's slot (bytes: the struct has default member
// initialisers, which a __shared__ variable cannot run). Its static shared memory, with the
// deterministic kernels' semaphore slot (dq_writer.cuh), is padded to 1 KiB by the 1024-aligned
// dynamic base.
__device__ __forceinline__ void* work_slot_bytes(int wg) {
  __shared__ alignas(16) unsigned char bytes[2 * sizeof(Sm90BackwardWork)];  // one per MMA warpgroup
  return bytes + wg * sizeof(Sm90BackwardWork);
}
// The object thread 0 of the warpgroup created there (kernel.cuh).
__device__ __forceinline__ const Sm90BackwardWork& work_slot(int wg) {
  return *std::launder(static_cast<const Sm90BackwardWork*>(work_slot_bytes(wg)));
}

}  // namespace fastattn::cuda
