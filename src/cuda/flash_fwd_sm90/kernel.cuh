// kernel.cuh — the sm90 (Hopper) forward kernel: TMA loads on an mbarrier pipeline, wgmma,
// warp specialisation with register reallocation (FlashAttention-3's structure, Shah et al.
// 2024; our code).
//
// Roles (kThreads = 128 * (1 + kConsumerWarpgroups)):
//   warpgroup 0       producer: setmaxnreg.dec to kProducerRegisters; one thread issues every
//                     TMA load of every tile the CTA runs (producer.cuh, tile_scheduler.cuh);
//                     the other 127 threads retire
//   warpgroups 1..    consumers: setmaxnreg.inc to kConsumerRegisters; 64 query rows each,
//                     S = Q K^T, softmax, O += P V (consumer.cuh), then the epilogue
//                     (epilogue.cuh: a TMA store of the warpgroup's rows from shared memory
//                     where `tma_store_o`, else stores from the registers)
// After the role split no barrier spans both roles: they meet only on mbarriers.
// kCluster (plan.hpp: sm90_cluster): launched in clusters of two CTAs along x, which run query
// blocks 2j and 2j + 1 of one (head, batch) with the same key tiles; each producer loads half of
// every K and V tile into both CTAs (producer.cuh), so the CTAs meet on each other's mbarriers:
// a cluster barrier after the barriers' initialisation, and before its exit each producer waits
// until the other CTA's consumers made their last arrivals on this CTA's barriers (produce_tail).
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
#include "cuda/sm90/bulk_reduce.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/warpgroup.cuh"

namespace fastattn::cuda {

// kVarlen: cu_seqlens batches (tile_scheduler.cuh); false compiles the padded kernel as before.
// kWgOrder (overlap only): the consumer warpgroups issue their GEMMs in turn (consumer.cuh).
// T::kCtasPerSm CTAs share an SM (two for the d = 128 short tile: plan.hpp sm90_ctas_per_sm),
// and ptxas gives the kernel the registers that leaves (setmaxnreg moves them between roles).
template <class T, bool kSoftcap, bool kOverlap, bool kVarlen, bool kWgOrder = false, bool kCluster = false>
__global__ void __launch_bounds__(T::kThreads, T::kCtasPerSm)
    flash_forward_sm90_kernel(const __grid_constant__ ForwardParams p, const __grid_constant__ Sm90TileSchedule sched,
                              const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                              const __grid_constant__ CUtensorMap map_v, const __grid_constant__ CUtensorMap map_o,
                              const int tma_store_o) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Scheduler = Sm90TileScheduler<T>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const Sm90Smem<T> smem{(raw + 1023u) & ~1023u};

  static_assert(!kCluster || (!kVarlen && kOverlap && kWgOrder), "clusters: padded calls, ordered overlap loop");
  if (threadIdx.x == 0) smem.init_barriers(sm90_kv_empty_arrivals<T, kCluster>());
  if constexpr (kCluster) {
    __syncwarp();          // warp 0 converged again after thread 0's initialisation (.aligned)
    sm90::cluster_sync();  // the other CTA's barriers are initialised before any load or arrival reaches them
  } else {
    __syncthreads();
  }

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int warp_in_wg = static_cast<int>(threadIdx.x) / 32 % 4;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  // Both roles walk the same tiles (grid: one; persistent: a stride of the grid), each with its
  // own count of the pipeline's uses.
  Sm90PipelineCount count;
  if (warpgroup == 0) {
    sm90::warpgroup_release_registers<T::kProducerRegisters>();
    if (threadIdx.x == 0) {
      sm90::prefetch_tensor_map(&map_q);
      sm90::prefetch_tensor_map(&map_k);
      sm90::prefetch_tensor_map(&map_v);
      const int rank = kCluster ? static_cast<int>(sm90::cluster_cta_rank()) : 0;
      for (int64_t tile = Scheduler::first_tile(); tile < sched.num_tiles; tile += Scheduler::stride(sched)) {
        produce<T, kVarlen, kCluster>(smem, Scheduler::template work<kVarlen>(p, sched, tile), count, &map_q, &map_k,
                                      &map_v, rank);
      }
      if constexpr (kCluster) produce_tail<T>(smem, count);
    }
  } else {
    sm90::warpgroup_claim_registers<T::kConsumerRegisters>();
    if constexpr (kWgOrder) wg_order_start<T>(warpgroup - 1);
    for (int64_t tile = Scheduler::first_tile(); tile < sched.num_tiles; tile += Scheduler::stride(sched)) {
      const Sm90TileWork w = Scheduler::template work<kVarlen>(p, sched, tile);
      Sm90ConsumerState<T> state;
      consume<T, kSoftcap, kOverlap, kVarlen, kWgOrder, kCluster>(state, smem, p, w, count, warpgroup - 1, warp_in_wg,
                                                                  lane);
      store_output_sm90<T, kVarlen>(state, p, w, smem, &map_o, tma_store_o != 0, warpgroup - 1, warp_in_wg, lane);
    }
    // The shared memory of the last TMA store must outlive its reads (epilogue.cuh).
    if constexpr (T::kOutputTile && !kVarlen) {
      if (tma_store_o != 0 && warp_in_wg == 0 && lane == 0) sm90::bulk_wait_group<0>();
    }
  }
#endif
}

}  // namespace fastattn::cuda
