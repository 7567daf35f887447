// kernel_dynamic.cuh — the sm90 forward kernel under the dynamic tile scheduler (plan.hpp:
// Sm90Scheduler::dynamic): kernel.cuh's roles, pipeline and per-tile code, with one CTA per SM
// taking tiles from a global atomic counter instead of a fixed stride. A kernel of its own (and
// generated units of their own, flash_fwd_sm90_dynamic_*) so the grid/persistent kernel of
// kernel.cuh is compiled exactly as before.
//
// The tile numbers (tile_scheduler.cuh, persistent numbering: L2 sections, longest first inside
// each) are handed out as: CTA c takes tile c, then G + atomicAdd(counter, 1) (G = the grid; the
// counter is zeroed on the call's stream before the launch, launch_dynamic.cuh), until a number
// reaches num_tiles. A CTA that drew long tiles fetches fewer, so the CTAs finish together.
//
// Hand-over: a second thread of the producer warpgroup, the fetcher (warp 1, lane 0), takes
// the numbers and hands them to the load thread (warp 0, lane 0) and the consumer warpgroups
// through a ring of two tile numbers in shared memory (producer.cuh: tile_slot, tile_full,
// tile_empty). It stores number j in slot j % 2 and arrives on that slot's tile_full; before
// reusing a slot it waits on its tile_empty, on which the load thread and every consumer thread
// arrive once they have read the number. It issues the atomic for number j + 1 right after
// handing over number j, so the atomic's latency (and the wait for the slot) pass while the
// CTA runs tile j - 1 and j: the next number is there one tile ahead. A number >= num_tiles
// ends every loop. The mbarrier arrive (release) and wait (acquire) order the shared-memory
// store before the loads. Not the load thread itself: with the fetch in its loop ptxas spilled
// at the producer's registers. Registers: the producer warpgroup keeps 32, two consumer
// warpgroups 232 (traits.cuh: kDynamicProducerRegisters); tile numbers are decoded in 32-bit
// arithmetic (tile_scheduler.cuh: work<kVarlen, true>; the launcher checks num_tiles < 2^31).
// Deadlock-free: number j + 1 waits only for the readers to take number j - 1, which each does
// before running tile j - 1.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd_sm90/consumer.cuh"
#include "cuda/flash_fwd_sm90/epilogue.cuh"
#include "cuda/flash_fwd_sm90/producer.cuh"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/flash_fwd_sm90/traits.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/warpgroup.cuh"

namespace fastattn::cuda {

// The fetcher: warp 1 of the producer warpgroup (warp 0 issues the loads).
constexpr int kSm90FetcherThread = 32;

// The j-th tile number the CTA runs, into slot j % 2 (use j / 2 of the slot's barriers).
template <class T>
__device__ __forceinline__ void hand_over_tile(const Sm90Smem<T>& smem, int j, int64_t tile) {
  const int slot = j & 1, use = j >> 1;
  if (use > 0) sm90::mbarrier_wait(smem.tile_empty(slot), (use - 1) & 1);
  asm volatile("st.shared.b64 [%0], %1;\n" ::"r"(smem.tile_slot(slot)), "l"(tile) : "memory");
  sm90::mbarrier_arrive(smem.tile_full(slot));
}

template <class T>
__device__ __forceinline__ int64_t take_over_tile(const Sm90Smem<T>& smem, int j) {
  const int slot = j & 1, use = j >> 1;
  sm90::mbarrier_wait(smem.tile_full(slot), use & 1);
  int64_t tile;
  asm volatile("ld.shared.b64 %0, [%1];\n" : "=l"(tile) : "r"(smem.tile_slot(slot)) : "memory");
  sm90::mbarrier_arrive(smem.tile_empty(slot));
  return tile;
}

// tile_counter: one zeroed 64-bit counter per launch (launch_dynamic.cuh). sched.persistent is
// 1 (the persistent numbering); gridDim.x = min(num_tiles, SMs).
template <class T, bool kSoftcap, bool kOverlap, bool kVarlen>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_forward_sm90_dynamic_kernel(const __grid_constant__ ForwardParams p,
                                      const __grid_constant__ Sm90TileSchedule sched,
                                      const __grid_constant__ CUtensorMap map_q,
                                      const __grid_constant__ CUtensorMap map_k,
                                      const __grid_constant__ CUtensorMap map_v,
                                      unsigned long long* tile_counter) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Scheduler = Sm90TileScheduler<T>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const Sm90Smem<T> smem{(raw + 1023u) & ~1023u};

  if (threadIdx.x == 0) {
    smem.init_tile_barriers();
    smem.init_barriers();  // its fence covers the tile barriers too
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int warp_in_wg = static_cast<int>(threadIdx.x) / 32 % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  Sm90PipelineCount count;
  if (warpgroup == 0) {
    sm90::warpgroup_release_registers<T::kDynamicProducerRegisters>();  // traits.cuh
    if (threadIdx.x == 0) {  // the loads, tile by tile as the fetcher hands them over
      sm90::prefetch_tensor_map(&map_q);
      sm90::prefetch_tensor_map(&map_k);
      sm90::prefetch_tensor_map(&map_v);
      for (int j = 0;; ++j) {
        const int64_t tile = take_over_tile(smem, j);
        if (tile >= sched.num_tiles) break;
        produce<T, kVarlen>(smem, Scheduler::template work<kVarlen, true>(p, sched, tile), count, &map_q, &map_k, &map_v);
      }
    } else if (threadIdx.x == kSm90FetcherThread) {  // the tile numbers
      int64_t tile = blockIdx.x;
      for (int j = 0;; ++j) {
        hand_over_tile(smem, j, tile);
        if (tile >= sched.num_tiles) break;
        // Issued before the wait for the slot in hand_over_tile: the atomic's latency hides
        // behind the current tile.
        tile = static_cast<int64_t>(atomicAdd(tile_counter, 1ull)) + gridDim.x;
      }
    }
  } else {
    sm90::warpgroup_claim_registers<T::kDynamicConsumerRegisters>();
    for (int j = 0;; ++j) {
      const int64_t tile = take_over_tile(smem, j);
      if (tile >= sched.num_tiles) break;
      const Sm90TileWork w = Scheduler::template work<kVarlen, true>(p, sched, tile);
      Sm90ConsumerState<T> state;
      consume<T, kSoftcap, kOverlap, kVarlen>(state, smem, p, w, count, warpgroup - 1, warp_in_wg, lane);
      store_output_sm90<T, kVarlen>(state, p, w, smem, nullptr, false, warpgroup - 1, warp_in_wg, lane);  // direct stores
    }
  }
#endif
}

}  // namespace fastattn::cuda
