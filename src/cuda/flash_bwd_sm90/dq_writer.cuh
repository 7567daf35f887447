// dq_writer.cuh — how one step's dQ tile (dS K of one query block, fp32, unscaled: the convert
// kernel multiplies by the softmax scale) reaches the global fp32 accumulator (plan.hpp:
// Sm90DqReduction).
//
//   atomic  every MMA thread adds its kDqN / 4 float pairs with red.global.add.v2.f32 to
//           dq_accum[total_q][heads][head_dim] (flash_bwd/prepare.cuh converts it).
//   atomic_tiles  every MMA thread adds its kDqN / 8 float4 with red.global.add.v4.f32 to the
//           tile-ordered accumulator below (a warp's adds of one n8 slice: 512 contiguous
//           bytes).
//   bulk    each MMA warpgroup stores its 64 x kDqN tile in its sdQ in accumulator order
//           (layout.hpp: dq_tile_index; float4 stores, no bank conflict), and the whole tile is
//           added with one cp.reduce.async.bulk to the tile's own contiguous block of
//           dq_accum[tile row][heads][warpgroup][128 x kDqN / 2] (layout.hpp: dq_first_tile_row;
//           dq_convert.cuh converts it). FlashAttention-3's dQ path. The add is issued by the
//           dQ writer warp (two in deterministic kernels, taking steps in turn; run_dq_writer
//           below; plan.hpp: kSm90BwdDqWriter, the default), or
//           in builds without it by the warpgroup's thread 0, whose read of sdQ then has a
//           whole step to finish before the warpgroup stores the next tile there.
//
// Deterministic mode (tile_scheduler.hpp): the adds of a (batch, head, query block) go in one
// fixed key-block order. A semaphore per (batch, head, query block) counts finished adders; a
// key block waits until it counts every adder ranked before it (rank x adders per CTA: the two
// MMA warpgroups' tiles), adds, then counts its own with a release: each MMA warpgroup adds 1,
// or, in bulk mode with the writer warp, the writer adds 2 for both tiles, and the MMA
// warpgroups never wait for a turn (run_dq_writer below). Each element gets its adds in one
// fixed order: bitwise repeatable.
//
// When the release goes (FASTATTN_SM90_BWD_LATE_RELEASE, a build knob for the A/B; default 1):
//   0  in the step of the adds: a fence that waits until the adds are performed (a round trip
//      to L2) and a warpgroup barrier, on every step's critical path. Measured 0.55-0.69x the
//      non-deterministic backward on the H200 (thirteenth session), d = 64 the lowest, whose
//      steps are the shortest.
//   1  at the start of the next step's dQ output (and after the last step): the adds had the
//      next step's GEMMs to complete, so the fence finds them done. The key block after this
//      one in a query block's order sees them up to a step later: where it runs beside this one
//      (the first CTAs of a head in ascending order), it runs up to a step further behind.
//   Measured on the H200 (2026-12-05, seventeenth session, the two builds in one job, the 4
//   shapes of cuda_bench determinism): 0 took 1.071x the time of 1 (1.035-1.138x).
//   The writer warp does not use the knob: it counts a step's adds as soon as they are
//   performed, which is off the MMA warpgroups' path (run_dq_writer).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd/tile_ops.cuh"
#include "cuda/flash_bwd_sm90/consumer.cuh"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_bwd_sm90/producer.cuh"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/sm90/bulk_reduce.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/warpgroup.cuh"

#ifndef FASTATTN_SM90_BWD_LATE_RELEASE
#define FASTATTN_SM90_BWD_LATE_RELEASE 1
#endif

namespace fastattn::cuda {

constexpr bool kSm90DqLateRelease = FASTATTN_SM90_BWD_LATE_RELEASE != 0;

// The semaphore of (batch, head, query block m).
template <class T>
__device__ __forceinline__ int* dq_semaphore(const BackwardParams& p, const Sm90BackwardWork& w, int head, int m) {
  const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  return p.dq_semaphores + (static_cast<int64_t>(w.batch) * p.num_heads + head) * m_blocks + m;
}

// The semaphore of (batch, head, query block) and this CTA's turn on it.
struct Sm90DqTurn {
  int* semaphore;
  int rank;  // adders (of the key blocks before this one) to wait for
};
template <class T>
__device__ __forceinline__ Sm90DqTurn dq_turn(const BackwardParams& p, const Sm90BackwardWork& w, int head, int m,
                                             int adders_per_cta) {
  Sm90DqTurn turn;
  turn.semaphore = dq_semaphore<T>(p, w, head, m);
  turn.rank = adders_per_cta * w.dq_rank(m, T::kBlockM, T::kBlockN);
  return turn;
}

// Late release: the semaphore of warpgroup wg's adds not yet counted, written and read by its
// thread 0 alone. In shared memory, not a register: kept across the step's GEMMs beside dK/dV,
// a register pushed ptxas into spilling (bulk mode), and recomputing it costs divisions.
__device__ __forceinline__ int*& pending_dq_semaphore(int wg) {
  __shared__ int* pending[2];  // one per MMA warpgroup
  return pending[wg];
}

__device__ __forceinline__ void wait_for_turn(const Sm90DqTurn& turn) {
  while (sm90::load_acquire_gpu(turn.semaphore) < turn.rank) {
  }
}

// Global address of row `row` (of the sequence), column `col` of head `head`'s dQ accumulator.
template <class T>
__device__ __forceinline__ float* dq_accum_row(const BackwardParams& p, const Sm90BackwardWork& w, int head, int row,
                                              int col) {
  const int64_t row_elems = static_cast<int64_t>(p.num_heads) * T::kHeadDim;
  const int64_t first_row = T::kVarlen ? static_cast<int64_t>(w.q_start) : static_cast<int64_t>(w.batch) * p.seqlen_q;
  return p.dq_accum + (first_row + row) * row_elems +
         static_cast<int64_t>(head) * T::kHeadDim + col;
}

// Whether n8 slice nt of warpgroup wg's dQ tile holds columns of the head (d = 96: warpgroup 1's
// tile is columns 64..127 of the zero-padded K, and only 64..95 exist). Constant true for head
// dims without padding.
template <class T>
__device__ __forceinline__ bool dq_slice_exists(int wg, int nt) {
  return !T::kPaddedColumns || T::kDqN * wg + 8 * nt < T::kHeadDim;
}

// Deterministic mode, around a warpgroup's adds (every thread of MMA warpgroup wg): late
// release first counts the previous step's adds (every thread's fence, the warpgroup meets,
// thread 0 releases); then thread 0 waits for the turn and the warpgroup meets; after the adds,
// without late release, the warpgroup fences, meets again and thread 0 counts them.
template <class T>
__device__ __forceinline__ Sm90DqTurn begin_ordered_adds(const BackwardParams& p, const Sm90BackwardWork& w,
                                                         const Sm90BwdStep& s, int wg, int t) {
  if constexpr (kSm90DqLateRelease) {
    if (s.index > 0) {
      sm90::fence_acq_rel_gpu();
      sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
      if (t == 0) sm90::add_release_gpu(pending_dq_semaphore(wg), 1);
    }
  }
  const Sm90DqTurn turn = dq_turn<T>(p, w, s.head, s.m_block, T::kMmaWarpgroups);
  if (t == 0) {
    wait_for_turn(turn);
    if constexpr (kSm90DqLateRelease) pending_dq_semaphore(wg) = turn.semaphore;
  }
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
  sm90::fence_acq_rel_gpu();
  return turn;
}
__device__ __forceinline__ void end_ordered_adds(const Sm90DqTurn& turn, int wg, int t) {
  if constexpr (kSm90DqLateRelease) return;
  sm90::fence_acq_rel_gpu();
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
  if (t == 0) sm90::add_release_gpu(turn.semaphore, 1);
}

// Atomic mode, run by every thread of MMA warpgroup wg (t: its index in the warpgroup).
template <class T, bool kDeterministic>
__device__ __forceinline__ void add_dq_atomic(const float (&acc_dq)[T::kDqN / 8][4], const BackwardParams& p,
                                              const Sm90BackwardWork& w, const Sm90BwdStep& s, int wg, int t) {
  Sm90DqTurn turn{};
  if constexpr (kDeterministic) turn = begin_ordered_adds<T>(p, w, s, wg, t);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = s.q0 + sm90_layout::acc_row(t, 2 * half);
    if (row >= w.len_q) continue;
    float* dst = dq_accum_row<T>(p, w, s.head, row, T::kDqN * wg);
#pragma unroll
    for (int nt = 0; nt < T::kDqN / 8; ++nt) {
      if (!dq_slice_exists<T>(wg, nt)) continue;
      red_add_pair(dst + sm90_layout::acc_col(t, nt, 0), acc_dq[nt][2 * half], acc_dq[nt][2 * half + 1]);
    }
  }
  if constexpr (kDeterministic) end_ordered_adds(turn, wg, t);
}

// The tile modes: the first float of (query block m, head, warpgroup wg)'s tile in the
// accumulator.
template <class T>
__device__ __forceinline__ float* dq_accum_tile(const BackwardParams& p, const Sm90BackwardWork& w, int head, int m,
                                               int wg) {
  const int64_t row = sm90_layout::dq_first_tile_row(T::kVarlen, w.batch, w.q_start, p.seqlen_q, T::kBlockM) + m;
  return p.dq_accum + ((row * p.num_heads + head) * T::kMmaWarpgroups + wg) * (T::kDqTileBytes / 4);
}

// Atomic-tiles mode, run by every thread of MMA warpgroup wg. Rows past the sequence go too (as
// in bulk mode, below); d = 96: warpgroup 1's zero columns do not.
template <class T, bool kDeterministic>
__device__ __forceinline__ void add_dq_atomic_tiles(const float (&acc_dq)[T::kDqN / 8][4], const BackwardParams& p,
                                                    const Sm90BackwardWork& w, const Sm90BwdStep& s, int wg, int t) {
  Sm90DqTurn turn{};
  if constexpr (kDeterministic) turn = begin_ordered_adds<T>(p, w, s, wg, t);
  float* tile = dq_accum_tile<T>(p, w, s.head, s.m_block, wg);
#pragma unroll
  for (int nt = 0; nt < T::kDqN / 8; ++nt) {
    if (!dq_slice_exists<T>(wg, nt)) continue;
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(tile + sm90_layout::dq_tile_index(t, nt, 0)),
                 "f"(acc_dq[nt][0]), "f"(acc_dq[nt][1]), "f"(acc_dq[nt][2]), "f"(acc_dq[nt][3])
                 : "memory");
  }
  if constexpr (kDeterministic) end_ordered_adds(turn, wg, t);
}

// The dQ writers' fences beside the semaphore (FASTATTN_SM90_BWD_WRITER_FENCES, a build knob for
// the A/B: 0, the default, or 1). With 1 a fence.acq_rel.gpu follows the turn's acquire load and
// precedes the count's release reduction; each compiles to a MEMBAR.GPU (with an L1
// invalidation) on top of the one the release itself brings, and the writers' ERRBARs held 4.8%
// of the deterministic d = 64 kernel's warp-state samples (ncu, twenty-fifth session). With 0
// the acquire load and the release reduction order alone: an acquire orders the thread's later
// accesses after it, a release its earlier ones before it (PTX ISA, memory consistency model:
// each is an acquire / release pattern by itself), so the extra fence adds no order; the proxy
// fences stay, for the bulk adds in the async proxy. FlashAttention's deterministic semaphore
// has one release and a bare acquire too (its CuTe DSL barrier: arrive_inc a red.release,
// wait_eq an ld.acquire loop; CUTLASS's GenericBarrier: a fence then a relaxed red). The single
// writer (FASTATTN_SM90_BWD_DQ_WRITERS=1) keeps its acquire-side fence either way, as measured;
// its count's fence follows the knob (count_bulk_adds; not run with 0).
// Measured on an H100 (2026-12-06, twenty-sixth session, the two builds in one job, cuda_bench
// determinism's four shapes): 0 took 0.978x the time of 1 (0.957-0.999x), its own default's
// speed 0.750-1.081x against 0.738-1.083x; the six deterministic CudaSm90Backward tests passed
// on it (bitwise over 10 runs, against float64).
#ifndef FASTATTN_SM90_BWD_WRITER_FENCES
#define FASTATTN_SM90_BWD_WRITER_FENCES 0
#endif
constexpr bool kSm90DqWriterFences = FASTATTN_SM90_BWD_WRITER_FENCES != 0;

// The dQ writer warp, deterministic: counts `adders` on the semaphore once this thread's bulk
// groups are performed (not only read from sdQ), then releases them to the
// next key block's acquire (generic and async proxies both ordered before the release). The
// MMA warpgroups' bulk path (builds without the writer) keeps its own copy of these four lines,
// so that build's SASS stays the one measured (moved into this function, ptxas reorders the
// load of pending_dq_semaphore).
__device__ __forceinline__ void count_bulk_adds(int* semaphore, int adders) {
  sm90::bulk_wait_group<0>();
  sm90::fence_proxy_async_global();
  if constexpr (kSm90DqWriterFences) sm90::fence_acq_rel_gpu();
  sm90::add_release_gpu(semaphore, adders);
}

// Bulk mode: a thread's part of its warpgroup's dQ tile into its sdQ tile (s_tile) in accumulator
// order (float4 stores, no bank conflict), fenced for the bulk copy that reads it.
template <class T>
__device__ __forceinline__ void store_dq_tile(const float (&acc_dq)[T::kDqN / 8][4], uint32_t s_tile, int t) {
#pragma unroll
  for (int nt = 0; nt < T::kDqN / 8; ++nt) {  // d = 96: warpgroup 1's zero columns too
    const uint32_t addr = s_tile + sm90_layout::dq_tile_index(t, nt, 0) * 4;
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "f"(acc_dq[nt][0]), "f"(acc_dq[nt][1]),
                 "f"(acc_dq[nt][2]), "f"(acc_dq[nt][3])
                 : "memory");
  }
  sm90::fence_proxy_async_shared();  // the bulk copy reads sdQ in the async proxy
}

// Bulk mode, run by every thread of MMA warpgroup wg. Rows past the sequence go too: the tile
// is this query block's alone, and the convert kernel reads only rows inside the sequence.
// With the dQ writer warp (kSm90BwdDqWriter) the warpgroup only stores its tile in the step's
// sdQ buffer and hands it over (dq_full(wg, buffer)); the step's writer adds it, and in
// deterministic mode waits for the turn and counts the adds (run_dq_writer below).
template <class T, bool kDeterministic>
__device__ __forceinline__ void add_dq_bulk(const float (&acc_dq)[T::kDqN / 8][4], const Sm90BwdSmem<T>& smem,
                                            const BackwardParams& p, const Sm90BackwardWork& w, const Sm90BwdStep& s,
                                            int wg, int t) {
  static_assert(kSm90BwdDqWriter || T::kDqBuffers == 1, "a second sdQ buffer needs the dQ writer");
  constexpr int kBuffers = T::kDqBuffers;
  // sdQ[buffer][wg]: (64, kDqN) fp32 in accumulator order, kDqTileBytes
  const int buffer = kBuffers == 1 ? 0 : s.index % kBuffers;
  const uint32_t s_tile = smem.dq_tile(wg, buffer);
  if constexpr (kSm90BwdDqWriter) {
    // The writer's add of step s.index - kBuffers, the buffer's last, has read it (that step's
    // phase of dq_empty).
    if (s.index >= kBuffers) {
      sm90::mbarrier_wait(smem.dq_empty(wg, buffer), static_cast<uint32_t>((s.index / kBuffers - 1) & 1));
    }
    store_dq_tile<T>(acc_dq, s_tile, t);
    sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    if (t == 0) sm90::mbarrier_arrive(smem.dq_full(wg, buffer));
    return;
  }
  if (t == 0) {
    if constexpr (kDeterministic && kSm90DqLateRelease) {
      if (s.index > 0) {  // the previous step's add is performed (so it has read sdQ[wg]); count it
        sm90::bulk_wait_group<0>();
        sm90::fence_proxy_async_global();
        sm90::fence_acq_rel_gpu();
        sm90::add_release_gpu(pending_dq_semaphore(wg), 1);
      }
    } else {
      sm90::bulk_wait_group_read<0>();  // the previous step's add has read sdQ[wg]
    }
  }
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
  store_dq_tile<T>(acc_dq, s_tile, t);
  sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
  if (t != 0) return;
  Sm90DqTurn turn{};
  if constexpr (kDeterministic) {
    turn = dq_turn<T>(p, w, s.head, s.m_block, T::kMmaWarpgroups);
    wait_for_turn(turn);
    if constexpr (kSm90DqLateRelease) pending_dq_semaphore(wg) = turn.semaphore;
    sm90::fence_acq_rel_gpu();
    sm90::fence_proxy_async_global();
  }
  sm90::bulk_reduce_add_f32(dq_accum_tile<T>(p, w, s.head, s.m_block, wg), s_tile, T::kDqTileBytes);
  sm90::bulk_commit_group();
  if constexpr (kDeterministic && !kSm90DqLateRelease) {
    sm90::bulk_wait_group<0>();  // the adds are performed, not only read from sdQ
    sm90::fence_proxy_async_global();
    sm90::fence_acq_rel_gpu();
    sm90::add_release_gpu(turn.semaphore, 1);
  }
}

// After the last step (every thread of MMA warpgroup wg): bulk mode's copies are complete
// before the CTA's shared memory goes; deterministic mode with late release counts the last
// step's adds. With the dQ writer warp, the writers do both.
template <Sm90DqReduction kDq, bool kDeterministic>
__device__ __forceinline__ void finish_dq(int steps, int wg, int t) {
  constexpr bool kRelease = kDeterministic && kSm90DqLateRelease;
  if constexpr (kDq == Sm90DqReduction::bulk) {
    if (kSm90BwdDqWriter || t != 0) return;
    sm90::bulk_wait_group<0>();
    if constexpr (kRelease) {
      if (steps > 0) {  // the last step's add is performed (waited for above)
        sm90::fence_proxy_async_global();
        sm90::fence_acq_rel_gpu();
        sm90::add_release_gpu(pending_dq_semaphore(wg), 1);
      }
    }
  } else if constexpr (kRelease) {
    if (steps == 0) return;
    sm90::fence_acq_rel_gpu();
    sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    if (t == 0) sm90::add_release_gpu(pending_dq_semaphore(wg), 1);
  }
}

// The dQ writer warp (bulk mode with kSm90BwdDqWriter; lane 0 of producer warp 1, and of warps
// 2 .. W in deterministic kernels, below): per step,
// both MMA warpgroups' tiles with one bulk reduce-add each, then sdQ back to them once the adds
// have read it. Deterministic mode: before the adds it waits for the turn, after them it counts
// them on the semaphore once they are performed, so the MMA warpgroups never wait on a
// semaphore: their step continues as soon as their tile is in sdQ, and they wait only if the
// writer still reads the buffer when they next use it (a step later with one sdQ buffer, two with
// two). FlashAttention-3's backward has the same writer
// (hopper/epilogue_bwd.hpp and its dQ writer warp); our semaphore protocol is the MMA
// warpgroups' one above, moved here.
//
// Writers (plan.hpp: sm90_dq_writers, FASTATTN_SM90_BWD_DQ_WRITERS; several in deterministic
// kernels, one in the others): with one, a step's wait until its adds are performed (a round
// trip to L2), its count and the next step's turn (another round trip, fences around both)
// follow one another in one thread, so the writer's cycle per step can outlast the MMA
// warpgroups' step: on the GQA row of cuda_bench determinism, where key block 0 (whose turns are
// all rank 0) bounds the grid, the deterministic backward took 1.31x the default's time on an
// H100 (twenty-fourth session). With W writers, lane 0 of producer warps 1 .. W take steps
// j, j + W, ...: one waits for its adds and its next turn while the others issue. A bulk group
// can be waited for only by the thread that committed it, so each writer counts its own steps.
// Each sdQ buffer's hand-offs stay in its steps' order: with one sdQ buffer (plan.hpp:
// sm90_backward_dq_buffers, the default) a writer waits for dq_full's phase i only after the writer of step i - 1 has seen
// phase i - 1 complete (dq_writer_token). Without that, its wait for phase i's parity could
// return while phase i - 1 is still open (phase i - 2, of the same parity, has completed; at
// step 1 it would return at once). And dq_full cannot complete phase i + 1 before this writer
// hands sdQ back (dq_empty), so the wait cannot skip a phase either. With two buffers and two
// writers each writer has a buffer of its own and needs no token (kTokens below).
// The ranks, orders and semaphores are the single writer's; the CPU step model
// (cuda_sm90_backward_schedule_test.cpp) models one writer, whose waits between CTAs these
// writers do not add to (argued here, not modelled). Measured: plan.hpp sm90_dq_writers.
//
// A single writer counts step i's adds at the top of step i + 1, before its turn: it waits until
// step i's adds are performed, then for the next turn, in sequence. (Counting them after step
// i + 1's adds are issued, so that the two waits overlap, was a build knob until the
// twenty-seventh session: on an H100 it made the deterministic backward 1-5% slower on three of
// four rows, the fourth even; docs/cuda-sm90-backward-dq.md "The dQ writer warp".)

// Several writers: token[j] is the hand-off to writer j. The writer before it in the ring
// (j - 1 mod W) arrives on it once it has seen dq_full's phase of its step, so its k-th arrival
// (phase k) lets writer j wait for the next step's tiles; it cannot arrive again before writer j
// has handed sdQ back from that step. Initialised by writer 0 before the writers meet (kernel.cuh).
// Static shared memory (24 bytes), within the 1 KiB the kernel reserves (kernel.cuh).
constexpr int kMaxDqWriters = 3;  // producer warps 1 .. 3
__device__ __forceinline__ uint32_t dq_writer_token(int writer) {
  __shared__ alignas(8) uint64_t token[kMaxDqWriters];
  return static_cast<uint32_t>(__cvta_generic_to_shared(&token[writer]));
}

// A writer's wait for its step's turn, then the fences that order its bulk adds after the adds
// it waited for. With several writers a turn of rank 0 (the first key block of the query
// block's order) waits for nobody, so it skips the acquire's round trip and the fences, and
// drops the acq_rel fence (unless FASTATTN_SM90_BWD_WRITER_FENCES=1); the single writer keeps both,
// as measured (A/B builds).
template <int kWriters>
__device__ __forceinline__ void wait_for_writer_turn(const Sm90DqTurn& turn) {
  if (kWriters > 1 && turn.rank == 0) return;
  wait_for_turn(turn);
  if constexpr (kWriters == 1 || kSm90DqWriterFences) sm90::fence_acq_rel_gpu();
  sm90::fence_proxy_async_global();
}

// Writer `writer` of kWriters (sm90_dq_writers) takes steps writer, writer + kWriters, ...
template <class T, bool kDeterministic, int kWriters>
__device__ __forceinline__ void run_dq_writer(const Sm90BwdSmem<T>& smem, const BackwardParams& p,
                                              const Sm90BackwardWork& w, int writer) {
  static_assert(kWriters == 1 || (kWriters <= kMaxDqWriters && kDeterministic),
                "several dQ writers: deterministic kernels only, at most kMaxDqWriters");
  if (w.steps <= writer) return;
  // Deterministic: the semaphore whose adds are issued and not yet counted.
  int* pending = nullptr;
  constexpr int kAdders = T::kMmaWarpgroups;  // one adder per MMA warpgroup's tile
  constexpr int kBuffers = T::kDqBuffers;
  // A writer waits for dq_full's phase of step i only once that of step i - kBuffers (the
  // buffer's previous use) has completed, or the parity wait could return early. Where
  // kBuffers is a multiple of kWriters, step i - kBuffers is this writer's own; otherwise the
  // tokens hand that over.
  constexpr bool kTokens = kWriters > 1 && kBuffers % kWriters != 0;
  Sm90StepCursor cursor = Sm90StepCursor::first(w);
  for (int k = 0; k < writer; ++k) cursor.advance(w);
  for (int i = writer; i < w.steps; i += kWriters) {
    int* current = nullptr;
    if constexpr (kDeterministic) {
      if (kWriters == 1 && i > 0) count_bulk_adds(pending, kAdders);
      const Sm90DqTurn turn = dq_turn<T>(p, w, cursor.head, cursor.m_block, T::kMmaWarpgroups);
      wait_for_writer_turn<kWriters>(turn);
      current = turn.semaphore;
    }
    // Tokens: step i - 1's writer has seen dq_full's phase of step i - 1 (its step (i - 1) / W).
    if constexpr (kTokens) {
      if (i > 0) sm90::mbarrier_wait(dq_writer_token(writer), static_cast<uint32_t>(((i - 1) / kWriters) & 1));
    }
    // Step i uses sdQ buffer i % kBuffers, the (i / kBuffers)-th phase of its barriers.
    const int buffer = kBuffers == 1 ? 0 : i % kBuffers;
    const uint32_t parity = static_cast<uint32_t>((i / kBuffers) & 1);
#pragma unroll
    for (int wg = 0; wg < T::kMmaWarpgroups; ++wg) {
      sm90::mbarrier_wait(smem.dq_full(wg, buffer), parity);
      sm90::bulk_reduce_add_f32(dq_accum_tile<T>(p, w, cursor.head, cursor.m_block, wg), smem.dq_tile(wg, buffer),
                                T::kDqTileBytes);
    }
    sm90::bulk_commit_group();
    if constexpr (kTokens) sm90::mbarrier_arrive(dq_writer_token(writer + 1 < kWriters ? writer + 1 : 0));
    pending = current;
    sm90::bulk_wait_group_read<0>();
#pragma unroll
    for (int wg = 0; wg < T::kMmaWarpgroups; ++wg) sm90::mbarrier_arrive(smem.dq_empty(wg, buffer));
    // Several writers: this step's count now, while the others issue the next steps.
    if constexpr (kWriters > 1) count_bulk_adds(pending, kAdders);
#pragma unroll
    for (int k = 0; k < kWriters; ++k) cursor.advance(w);
  }
  if constexpr (kDeterministic && kWriters == 1) {
    count_bulk_adds(pending, kAdders);
  } else if constexpr (!kDeterministic) {
    sm90::bulk_wait_group<0>();  // complete before the CTA exits
  }
}

}  // namespace fastattn::cuda
