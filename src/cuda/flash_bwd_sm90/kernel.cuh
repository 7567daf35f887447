// kernel.cuh — the sm90 (Hopper) backward kernel: K/V-stationary CTAs, TMA loads on an mbarrier
// ring, wgmma with transposed score GEMMs so P^T and dS^T feed register-operand GEMMs, warp
// specialisation with register reallocation (FlashAttention-3's backward structure, Shah et al.
// 2024; our code). The default backward on sm90 (flash_bwd_sm90/plan.hpp: kSm90BackwardDefault;
// measured in docs/cuda-sm90-backward.md).
//
// Roles (kThreads = 384):
//   warpgroup 0      producer: setmaxnreg.dec to 24. Warp 0 loads (producer.cuh); in bulk dQ
//                    mode with the dQ writer built (plan.hpp: kSm90BwdDqWriter), lane 0 of
//                    warp 1 adds the dQ tiles (dq_writer.cuh: run_dq_writer), in deterministic
//                    mode lane 0 of warps 1 .. W, steps in turn (plan.hpp: sm90_dq_writers); the
//                    rest retire.
//   warpgroups 1, 2  MMA: setmaxnreg.inc to 240; 64 keys each (d = 256: the same 64 keys, half
//                    of dK/dV's columns each, traits.cuh); per step the GEMMs and gradients
//                    (consumer.cuh), the dQ output (dq_writer.cuh); last, dK and dV
//                    (epilogue.cuh). Varlen: they first zero the tile rows past the
//                    sequence that TMA filled from the next one (consumer.cuh).
// After the role split the roles meet only on mbarriers.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <new>

#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd_sm90/consumer.cuh"
#include "cuda/flash_bwd_sm90/dq_writer.cuh"
#include "cuda/flash_bwd_sm90/epilogue.cuh"
#include "cuda/flash_bwd_sm90/producer.cuh"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/flash_bwd_sm90/traits.cuh"
#include "cuda/flash_bwd_sm90/work_slot.cuh"
#include "cuda/sm90/warpgroup.cuh"

namespace fastattn::cuda {

template <class T, bool kSoftcap, Sm90DqReduction kDq, bool kDeterministic>
__global__ void __launch_bounds__(T::kThreads, 1)
    flash_backward_sm90_kernel(const __grid_constant__ BackwardParams p, const __grid_constant__ CUtensorMap map_q,
                               const __grid_constant__ CUtensorMap map_k, const __grid_constant__ CUtensorMap map_v,
                               const __grid_constant__ CUtensorMap map_do) {
  static_assert(kDq != Sm90DqReduction::bulk || T::kBulkDqFits, "no shared memory for the bulk dQ tiles at this head dim");
  // The static shared memory of deterministic kernels (dq_writer.cuh: pending_dq_semaphore, the
  // writers' tokens) and of kernels with the dQ writer (work_slot.cuh: its slot) is padded to
  // 1 KiB (the dynamic base is 1024-aligned), on top of the dynamic T::kSmemBytes.
  static_assert(!(kDeterministic || (kDq == Sm90DqReduction::bulk && kSm90BwdDqWriter)) ||
                    T::kSmemBytes + 1024 <= 227 * 1024,
                "static + dynamic shared memory");
  static_assert(T::kMmaWarpgroups == 2, "one shared-memory slot per MMA warpgroup: work_slot.cuh, dq_writer.cuh");
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const Sm90BwdSmem<T> smem{(raw + 1023u) & ~1023u};
  // Each role derives the CTA's work after its register reallocation: a value computed before
  // the split and live into the 24-register producer branch would be spilled.
  // The tile index goes through an empty asm in each branch, so the compiler cannot hoist one
  // shared computation above the branches either.
  // Varlen: the grid covers the longest sequence's key blocks (p.seqlen_k); the CTA reads its
  // sequence's offsets and lengths (cu_seqlens, 4 cached loads per call), and a key block past
  // its sequence has no steps and writes nothing.
  auto work = [&p] {
    const int n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
    const bool shortest_first = sm90_dq_shortest_first(kDeterministic, p.sm90_tile_order);
    unsigned tile = blockIdx.x;
    asm volatile("" : "+r"(tile));
    if constexpr (T::kVarlen) {
      // The tile once (its batch picks the sequence), then its work on that sequence's lengths.
      const Sm90BackwardTile owned =
          sm90_backward_tile(tile, n_blocks, p.num_kv_heads, p.batch, p.sm90_tile_order, p.sm90_tile_group);
      const int q_start = p.cu_seqlens_q[owned.batch], k_start = p.cu_seqlens_k[owned.batch];
      Sm90BackwardWork w = sm90_backward_work(owned, p.group_size, p.cu_seqlens_q[owned.batch + 1] - q_start,
                                              p.cu_seqlens_k[owned.batch + 1] - k_start, p.window_left,
                                              p.window_right, p.bottom_right, T::kBlockM, T::kBlockN, shortest_first);
      w.q_start = q_start;
      w.k_start = k_start;
      return w;
    } else {
      return sm90_backward_work(tile, n_blocks, p.num_kv_heads, p.batch, p.sm90_tile_order, p.group_size,
                                p.seqlen_q, p.seqlen_k, p.window_left, p.window_right, p.bottom_right, T::kBlockM,
                                T::kBlockN, shortest_first, p.sm90_tile_group);
    }
  };

  if (threadIdx.x == 0) smem.init_barriers();
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int t = static_cast<int>(threadIdx.x) % 128;
  if (warpgroup == 0) {
    sm90::warpgroup_release_registers<T::kProducerRegisters>();
    if (t < 32) {
      produce_backward<T>(smem, p, work(), &map_q, &map_k, &map_v, &map_do, t);
    } else if constexpr (kDq == Sm90DqReduction::bulk && kSm90BwdDqWriter) {
      constexpr int kWriters = sm90_dq_writers(kDeterministic);  // lane 0 of warps 1 .. kWriters
      if constexpr (kWriters == 1) {
        if (t == 32) {  // the work in its own shared-memory slot: 24 registers cannot hold it
          new (work_slot_bytes(kDqWriterWorkSlot)) Sm90BackwardWork(work());
          run_dq_writer<T, kDeterministic, 1>(smem, p, work_slot(kDqWriterWorkSlot), 0);
        }
      } else if (t < 32 * (1 + kWriters)) {
        if (t == 32) {  // one copy of the work for the writers, and their hand-off barriers
          new (work_slot_bytes(kDqWriterWorkSlot)) Sm90BackwardWork(work());
#pragma unroll
          for (int j = 0; j < kWriters; ++j) sm90::mbarrier_init(dq_writer_token(j), 1);
          sm90::fence_barrier_init();
        }
        sm90::named_barrier_sync(kBarDqWriters, 32 * kWriters);
        if (t % 32 == 0) run_dq_writer<T, kDeterministic, kWriters>(smem, p, work_slot(kDqWriterWorkSlot), t / 32 - 1);
      }
    }
  } else {
    sm90::warpgroup_claim_registers<T::kMmaRegisters>();
    const int wg = warpgroup - 1;
    Sm90BwdMmaState<T> st;
#pragma unroll
    for (int nt = 0; nt < T::kNTilesD; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) st.acc_dk[nt][e] = st.acc_dv[nt][e] = 0.0f;
#pragma unroll
    for (int kp = 0; kp < T::kKStepsS; ++kp)
#pragma unroll
      for (int r = 0; r < 4; ++r) st.a_ds[kp][r] = 0u;  // dk_last order only (defined before step 0's fences)
    // The CTA's work: with the work in shared memory (work_slot.cuh) the warpgroup's copy,
    // written once by its thread 0; otherwise recomputed at each use.
    constexpr bool kWorkInSmem = sm90_bwd_work_in_smem<T>();
    if constexpr (kWorkInSmem) {
      static_assert(T::kSmemBytes + 1024 <= 227 * 1024, "work in shared memory: static + dynamic shared memory");
      if (t == 0) new (work_slot_bytes(wg)) Sm90BackwardWork(work());
      sm90::named_barrier_sync(kBarWarpgroup0 + wg, 128);
    }
    auto step_work = [&work, wg]() -> decltype(auto) {
      if constexpr (kWorkInSmem) {
        return work_slot(wg);  // const Sm90BackwardWork&
      } else {
        return work();  // Sm90BackwardWork, by value
      }
    };
    int steps;
    {
      const Sm90BackwardWork& w = step_work();
      steps = w.steps;
      if (steps > 0) {
        sm90::mbarrier_wait(smem.kv_full(), 0);
        // Varlen: K and V rows past the sequence's keys (the next sequence's) to zero before
        // any GEMM reads them (consumer.cuh: zero_key_rows_past_end). Uniform over the MMA
        // threads.
        if constexpr (T::kVarlen) zero_key_rows_past_end<T>(smem, w.k0, w.len_k, 128 * wg + t);
      }
    }
    // The steps and the last dK's wait under one guard: a CTA without steps then reaches no
    // wgmma wait on its way to the epilogue, and the zeroed dK/dV it carries are defined outside
    // any wgmma pipeline stage (with the work in shared memory and dK last, the wait after an
    // unguarded loop made ptxas serialise every wgmma, C7515; guarding the wait alone made it
    // inject one, C7517).
    if (steps > 0) {
      // Work in shared memory: the step's (head, query block) as running counters, as the
      // producer keeps them (a division on every step otherwise; at d = 128 ptxas spilled
      // around it in 8 kernels, in 2 without it).
      Sm90StepCursor cursor{};
      if constexpr (kWorkInSmem) cursor = Sm90StepCursor::first(step_work());
      for (int i = 0; i < steps; ++i) {
        // The work again each step, before the GEMMs and again for the dQ output (a few dozen
        // integer ops each): kept across the loop or the step, its dozen registers beside the 128
        // of dK/dV pushed ptxas into spilling at d = 128.
        Sm90BwdStep s;
        int k0;
        {
          const Sm90BackwardWork& w = step_work();
          s.index = i;
          s.stage = i % T::kStages;
          s.parity = static_cast<uint32_t>((i / T::kStages) & 1);
          s.ds_buffer = i & 1;
          s.head = kWorkInSmem ? cursor.head : w.head(i);
          s.m_block = kWorkInSmem ? cursor.m_block : w.m_block(i);
          s.q0 = s.m_block * T::kBlockM;
          if constexpr (!kWorkInSmem) s.full_tile = w.full_tile(s.m_block);
          if constexpr (T::kVarlen) {
            s.len_q = w.len_q;
            s.len_k = w.len_k;
          }
          k0 = w.k0;
        }
        // The shared-memory base and the thread index, opaque to the compiler once per step: the
        // addresses and descriptors derived from them are recomputed (a few integer ops) instead
        // of hoisted out of the loop, where ~30 of them were spilled (ptxas: 136 bytes).
        Sm90BwdSmem<T> smem_step = smem;
        int t_step = t;
        asm volatile("" : "+r"(smem_step.base), "+r"(t_step));
        float acc_dq[T::kDqN / 8][4];
        mma_step<T, kSoftcap>(st, acc_dq, smem_step, p, k0, s, wg, t_step);
        const Sm90BackwardWork& w = step_work();
        // Before the adds at d = 64 where they are atomics (work_slot.cuh:
        // sm90_bwd_advance_before_adds, why); the adds use s, not the cursor.
        constexpr bool kAdvanceBeforeAdds = kWorkInSmem && sm90_bwd_advance_before_adds<T::kHeadDim, kDeterministic, kDq>();
        if constexpr (kAdvanceBeforeAdds) cursor.advance(w);
        if constexpr (kDq == Sm90DqReduction::bulk) {
          add_dq_bulk<T, kDeterministic>(acc_dq, smem_step, p, w, s, wg, t_step);
        } else if constexpr (kDq == Sm90DqReduction::atomic_tiles) {
          add_dq_atomic_tiles<T, kDeterministic>(acc_dq, p, w, s, wg, t_step);
        } else {
          add_dq_atomic<T, kDeterministic>(acc_dq, p, w, s, wg, t_step);
        }
        if constexpr (kWorkInSmem && !kAdvanceBeforeAdds) cursor.advance(w);
      }
      finish_steps<T>(st);
    }
    finish_dq<kDq, kDeterministic>(steps, wg, t);
    store_key_gradients<T>(st, p, step_work(), wg, t);
  }
#endif
}

}  // namespace fastattn::cuda
