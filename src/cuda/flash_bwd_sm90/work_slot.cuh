// work_slot.cuh — where the sm90 backward's MMA warpgroups keep the CTA's work
// (Sm90BackwardWork: tile, query-block range, full-tile range, lengths, mask) across the steps
// (FASTATTN_SM90_BWD_WORK_IN_SMEM, a build knob; sm90_bwd_work_in_smem<T>() below):
//   recomputed from blockIdx twice a step (before the GEMMs and for the dQ output): ~235 of
//      the ~1140 SASS instructions a warp issues per full step at d = 128 (64-bit divisions
//      of the tile decomposition and the query-block range), where two MMA warps share a
//      scheduler and the step's GEMMs take ~2560 cycles: the issue slots are nearly full;
//   in shared memory: computed once by thread 0 of each MMA warpgroup into shared memory
//      (work_slot) and read from there at each use (ld.shared, reloaded after every barrier),
//      so no register holds it across the loop (kept across the loop in registers, ptxas
//      spilled at d = 128), and the steps' (head, query block) come from running counters
//      (Sm90StepCursor). SASS: the atomic_tiles step loop 27% (d = 64) / 24% (d = 128) fewer
//      static instructions; with dK last since the guard around the step loop (kernel.cuh).
// Measured on the H200 (2026-12-05, seventeenth session, the two builds of d = 64 and 128 in
// one job, issue 16's 27 rows, bench/results/nvidia-h200-session17-2026-12-05): in shared
// memory the backward alone is faster by a geomean of 8.1% (atomic_tiles dQ) and 10.7% (bulk),
// the deterministic kernels' time 0.89x; every CudaSm90Backward.* test of those dims passed.
// The dQ writer warps (dq_writer.cuh: run_dq_writer) keep their copy of the work in a slot of
// their own here whatever this knob says: their 24 registers cannot hold it.
#pragma once

#include <cuda_runtime.h>

#include <new>

#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"

// 1 (default): in shared memory at d = 64, 96 and 128, the dims timed faster that way on the GPU
// machine (d = 96: 1.08-1.12x on an H100, 2026-12-06); d = 256 recomputes it (3-6% faster
// without a mask, 3-6% slower causal with it: docs/cuda-sm90-backward.md). 2: every head dim;
// 0: none, the old build for an A/B.
#ifndef FASTATTN_SM90_BWD_WORK_IN_SMEM
#define FASTATTN_SM90_BWD_WORK_IN_SMEM 1
#endif

namespace fastattn::cuda {

template <class T>
constexpr bool sm90_bwd_work_in_smem() {
  return FASTATTN_SM90_BWD_WORK_IN_SMEM >= 2 ||
         (FASTATTN_SM90_BWD_WORK_IN_SMEM == 1 && (T::kHeadDim == 64 || T::kHeadDim == 96 || T::kHeadDim == 128));
}

// Where the MMA warpgroups advance their step cursor (kernel.cuh): before the step's dQ adds in
// d = 64's non-deterministic atomic kernels (FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS: -1, the
// default, d <= 64; 0 after the adds everywhere; 1 before them at every head dim, A/B builds).
// After the adds its LDS of the work slot queues behind their REDGs, and the compare waiting on
// it held 2.6% of the warp-state samples of d = 64's atomic_tiles kernel and 10% of d = 128's
// causal one (ncu, H100, twenty-third session). Moved before them (A/B on the H100, same
// session, atomic_tiles dQ, two rounds, docs/cuda-sm90-backward.md): d = 64 causal 0-2%
// faster (no row slower), d = 64 without a mask even; d = 128 up to 7% slower causal (b2 h16 s8k)
// and 10% without a mask (b4 h16 s4k), so the wait moved rather than went. d = 64's plain
// atomic kernels (not the plan's mode there) move with it, untimed. The deterministic
// and bulk kernels keep it after the adds: moved, it spilled 16 bytes in d = 128's deterministic
// bulk kernel (twenty-second session).
#ifndef FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS
#define FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS -1
#endif
static_assert(FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS >= -1 && FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS <= 1,
              "FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS: -1 (d <= 64), 0 or 1");
template <int kHeadDim, bool kDeterministic, Sm90DqReduction kDq>
constexpr bool sm90_bwd_advance_before_adds() {
  const bool head_dim_takes_it =
      FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS == 1 || (FASTATTN_SM90_BWD_ADVANCE_BEFORE_ADDS == -1 && kHeadDim <= 64);
  return head_dim_takes_it && !kDeterministic && kDq != Sm90DqReduction::bulk;
}

// Work in shared memory: MMA warpgroup wg's slot, and slot kDqWriterWorkSlot for the dQ writer
// warps, which share it (dq_writer.cuh: run_dq_writer, whose 24 registers cannot hold the work
// either; bytes: the struct has default member initialisers, which a __shared__ variable cannot
// run). Its static shared memory, with the deterministic kernels' semaphore slot and writer
// tokens (dq_writer.cuh), is padded to 1 KiB by the 1024-aligned dynamic base.
constexpr int kDqWriterWorkSlot = 2;
__device__ __forceinline__ void* work_slot_bytes(int slot) {
  // 2 MMA warpgroups, and the dQ writer where it is built
  __shared__ alignas(16) unsigned char bytes[(kSm90BwdDqWriter ? 3 : 2) * sizeof(Sm90BackwardWork)];
  return bytes + slot * sizeof(Sm90BackwardWork);
}
// The object thread 0 of the warpgroup (or the writer) created there (kernel.cuh).
__device__ __forceinline__ const Sm90BackwardWork& work_slot(int slot) {
  return *std::launder(static_cast<const Sm90BackwardWork*>(work_slot_bytes(slot)));
}

}  // namespace fastattn::cuda
