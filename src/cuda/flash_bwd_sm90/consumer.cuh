// consumer.cuh — one MMA warpgroup of the sm90 backward: 64 keys of the CTA's block (rows
// 64 wg.. of sK and sV; d = 256: the block's 64 keys, columns 128 wg.. of their dK and dV,
// traits.cuh: kSplitColumns), their dK and dV in registers across every step (query head x query
// block) of the CTA (FlashAttention-2's backward, Dao 2023, Algorithm 2, with FlashAttention-3's
// transposed score GEMMs; our code).
//
// Per step (stage s of the ring, producer.cuh), shapes per warpgroup:
//   S^T  = K_wg Q^T    (64 x kBlockM) f32   wgmma SS, K-major both, n = kBlockM
//   dP^T = V_wg dO^T   (64 x kBlockM) f32   wgmma SS, issued right after, so P^T's exponentials
//                                           run while it is on the tensor cores
//   P^T  = exp2(S^T * scale_log2 - lse2)    (mask on partial tiles; lse2 per query = column)
//   dS^T = P^T (dP^T - D)                   (soft-cap: times 1 - tanh^2)
//   P^T, dS^T -> 16-bit register A fragments (layout.hpp: the accumulator's columns are the
//   next GEMMs' k); dS^T also to shared memory (sdS, double-buffered) for the dQ GEMM
//   dV  += P^T dO     (64 x kDkvN)   wgmma RS, dO MN-major (its rows are the k)
//   dK  += dS^T Q     (64 x kDkvN)   wgmma RS, Q MN-major
//   named barrier: both warpgroups' dS^T halves are in sdS
//   dQ_wg = dS K      (64 x d/2: the warpgroup's columns, traits.cuh) wgmma SS, dS^T and K MN-major
//   wait dV/dK -> release stage s; wait dQ -> dq_writer.cuh adds it to the fp32 accumulator
// Varlen (T::kVarlen): key rows past the sequence zeroed in sK, sV once per CTA, query rows past
// it in the last query block's stage, before the GEMMs (zero_*_rows_past_end below).
// Register pins (sm90::fence_registers) keep the compiler from touching an accumulator or A
// fragment while a wgmma owns it (ptxas otherwise serialises the wgmma, C7510/C7519).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/fast_exp.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_bwd_sm90/producer.cuh"
#include "cuda/flash_bwd_sm90/tile_scheduler.hpp"
#include "cuda/flash_bwd_sm90/work_slot.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace fastattn::cuda {

// Named barriers of the sm90 backward (0 is __syncthreads).
enum Sm90BwdBarrier : int {
  kBarDsReady = 1,     // both MMA warpgroups wrote their dS^T rows (kMmaThreads)
  kBarWarpgroup0 = 2,  // bulk dQ and deterministic modes: one per MMA warpgroup (128), 2 and 3
  kBarRowsZeroed = 4,  // varlen: both MMA warpgroups zeroed a tile's rows past the sequence (kMmaThreads)
  kBarDqWriters = 5,   // deterministic bulk dQ with W > 1 dQ writer warps (32 W threads): work and tokens set
};

// The step order (FASTATTN_SM90_BWD_DK_LAST, a build knob; default 1). 1: FlashAttention-3's
// order for the key split (d = 64 / 96 / 128): dV, then dQ, then dK, and the step waits for dV
// and dQ only, so dK += dS^T Q runs on the tensor cores while the warpgroup adds its dQ tile and
// issues the next step's S^T and dP^T; the next step's first wait retires it and releases the
// stage (Q of the stage is dK's operand). dS^T's A fragments live across the step boundary for
// it (Sm90BwdMmaState::a_ds). d = 256 keeps its order. 0: the order above (dK before dQ, all
// three waited for within the step). Measured on the H200 (2026-12-05, thirteenth session, the
// two builds in one job, issue 16's 27 rows): 1 is faster by a geomean of 5.8% (atomic dQ),
// 6.0% (atomic_tiles) and 4.8% (bulk), backward alone, at a cost of 4-12 bytes of ptxas spills
// in the bulk and deterministic kernels. Only d = 64 and 128 were built that way on the GPU
// machine (timed, and their tests passed), so d = 96 keeps the old order until its tests have
// run in that order (FASTATTN_SM90_BWD_DK_LAST=2 builds it for d = 96 too, for that run).
#ifndef FASTATTN_SM90_BWD_DK_LAST
#define FASTATTN_SM90_BWD_DK_LAST 1
#endif
template <class T>
constexpr bool sm90_bwd_dk_last() {
  // A step releases the previous step's stage only after waiting for its own (q_full): with one
  // stage the producer would wait for a release that needs the load it holds back.
  constexpr bool dk_last =
      !T::kSplitColumns && (FASTATTN_SM90_BWD_DK_LAST >= 2 || (FASTATTN_SM90_BWD_DK_LAST == 1 && T::kHeadDim != 96));
  static_assert(!dk_last || T::kStages >= 2, "dk_last order: at least two stages");
  return dk_last;
}

template <class T>
struct Sm90BwdMmaState {
  float acc_dk[T::kNTilesD][4];  // dK: (64 keys of this warpgroup, kDkvN columns) f32, unscaled
  float acc_dv[T::kNTilesD][4];  // dV: (64 keys, kDkvN columns) f32
  // dk_last order only: dS^T as the A fragments of the dK GEMM still in flight from the
  // previous step (kKStepsS k16 slices).
  uint32_t a_ds[T::kKStepsS][4];
};

// One step's place: its stage, dS buffer, head, query block.
struct Sm90BwdStep {
  int index;  // of the CTA's steps
  int stage;
  uint32_t parity;
  int ds_buffer;
  int head, m_block, q0;
  bool full_tile;    // no element of the tile is masked (Sm90BackwardWork::full_tile; unset
                     // with the work in shared memory, where it is read at its use)
  int len_q, len_k;  // varlen kernels only (T::kVarlen): the sequence's lengths, for the mask
};

__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// Issues acc (64 keys x kBlockM queries) = A_wg B^T, no wait: A the key-side tile (sK or sV,
// rows kWgKeyRows wg..), B the query-side stage (sQ or sdO), both K-major; head_dim / 16 wgmma.
// (Descriptors: each operand's first built once, the others advanced from it by the k16 step's
// constant offset, sm90::descriptor_advance; the same values, fewer instructions.)
template <class T>
__device__ __forceinline__ void issue_transposed_scores(float (&acc)[T::kNTilesS][4], uint32_t s_keys,
                                                        uint32_t s_queries, int wg) {
  using E = typename T::Element;
  const uint64_t desc_a0 = sm90::kmajor_descriptor(s_keys + sm90_layout::kmajor_step(T::kBlockN, T::kWgKeyRows * wg, 0));
  const uint64_t desc_b0 = sm90::kmajor_descriptor(s_queries + sm90_layout::kmajor_step(T::kBlockM, 0, 0));
#pragma unroll
  for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
    // kmajor_step(rows, row0, kk) - kmajor_step(rows, row0, 0): row0 cancels, a constant per kk
    const uint64_t desc_a = sm90::descriptor_advance(desc_a0, sm90_layout::kmajor_step(T::kBlockN, 0, kk));
    const uint64_t desc_b = sm90::descriptor_advance(desc_b0, sm90_layout::kmajor_step(T::kBlockM, 0, kk));
    sm90::mma_ss<T::kBlockM, E>(acc, desc_a, desc_b, kk > 0 ? 1 : 0);
  }
  sm90::warpgroup_commit();
}

// Issues acc (64 keys x kDkvN) += A B, no wait: A from registers (kKStepsS k16 fragments),
// B columns kWgDkvCols wg.. of the (kBlockM, kHeadDim) stage tile read MN-major (its rows are
// the k).
template <class T>
__device__ __forceinline__ void issue_key_gradient(float (&acc)[T::kNTilesD][4], const uint32_t (&a)[T::kKStepsS][4],
                                                   uint32_t s_rows, int wg) {
  using E = typename T::Element;
  const uint64_t desc_b0 =
      sm90::mnmajor_descriptor(s_rows + sm90_layout::mnmajor_step(T::kBlockM, T::kWgDkvCols * wg, 0), T::kPanelBytesQ);
#pragma unroll
  for (int kp = 0; kp < T::kKStepsS; ++kp) {
    // mnmajor_step(rows, mn0, kp) - mnmajor_step(rows, mn0, 0) = kp * 2048: mn0 cancels
    const uint64_t desc_b = sm90::descriptor_advance(desc_b0, sm90_layout::mnmajor_step(T::kBlockM, 0, kp));
    sm90::mma_rs_tb<T::kDkvN, E>(acc, a[kp], desc_b, 1);
  }
}

// Issues acc_dq (this warpgroup's 64 x kDqN tile of dS K, columns kDqN * wg..) = dS K, no
// wait: A = dS read MN-major from the dS^T buffer (the k are its key rows), B = K MN-major from
// column kDqN * wg; kBlockN / 16 wgmma.
template <class T>
__device__ __forceinline__ void issue_dq(float (&acc)[T::kDqN / 8][4], uint32_t s_ds, uint32_t s_k, int wg) {
  using E = typename T::Element;
  const uint64_t desc_a0 = sm90::mnmajor_descriptor(s_ds + sm90_layout::mnmajor_step(T::kBlockN, 0, 0), T::kPanelBytesDS);
  const uint64_t desc_b0 =
      sm90::mnmajor_descriptor(s_k + sm90_layout::mnmajor_step(T::kBlockN, T::kDqN * wg, 0), T::kPanelBytesKV);
#pragma unroll
  for (int kk = 0; kk < T::kKStepsDq; ++kk) {
    const uint64_t desc_a = sm90::descriptor_advance(desc_a0, sm90_layout::mnmajor_step(T::kBlockN, 0, kk));
    const uint64_t desc_b = sm90::descriptor_advance(desc_b0, sm90_layout::mnmajor_step(T::kBlockN, 0, kk));
    sm90::mma_ss_tt<T::kDqN, E>(acc, desc_a, desc_b, kk > 0 ? 1 : 0);
  }
  sm90::warpgroup_commit();
}

// Queries i that key j sees (SequenceMask::visible solved for i): i + offset - left <= j <=
// i + offset + right and j < seqlen_k; clamped to int.
__device__ __forceinline__ void visible_queries(const SequenceMask& mask, int64_t j, int& first, int& last) {
  int64_t lo = -(int64_t{1} << 40), hi = int64_t{1} << 40;
  if (mask.right >= 0) lo = j - mask.offset - mask.right;
  if (mask.left >= 0) hi = j - mask.offset + mask.left;
  if (j >= mask.seqlen_k) hi = lo - 1;  // a padded key: no query
  const int64_t kMin = -(int64_t{1} << 30), kMax = int64_t{1} << 30;
  first = static_cast<int>(lo < kMin ? kMin : lo > kMax ? kMax : lo);
  last = static_cast<int>(hi < kMin ? kMin - 1 : hi > kMax ? kMax : hi);
}

// The mask of the call (padded batches: one for every sequence), from the kernel parameters.
__device__ __forceinline__ SequenceMask call_mask(const BackwardParams& p) {
  SequenceMask mask;
  mask.left = p.window_left;
  mask.right = p.window_right;
  mask.offset = p.bottom_right ? static_cast<int64_t>(p.seqlen_k) - p.seqlen_q : 0;
  mask.seqlen_k = p.seqlen_k;
  return mask;
}
// The mask of a step's sequence: the call's, or (varlen) with the sequence's lengths.
template <class T>
__device__ __forceinline__ SequenceMask step_mask(const BackwardParams& p, const Sm90BwdStep& s) {
  SequenceMask mask = call_mask(p);
  if constexpr (T::kVarlen) {
    mask.offset = p.bottom_right ? static_cast<int64_t>(s.len_k) - s.len_q : 0;
    mask.seqlen_k = s.len_k;
  }
  return mask;
}

// -inf at the masked elements of a partial tile (full tiles skip it: Sm90BwdStep::full_tile):
// element (nt, e) is key k0 + kWgKeyRows wg + acc_row(t, e), query q0 + 2 (t % 4) + 8 nt + e % 2. Per
// key row h the visible queries, shifted by the thread's column, bound the immediate
// 8 nt + e % 2 (4 registers, recomputed per step and live only in this loop: kept across the
// step loop, ptxas spilled them).
template <class T>
__device__ __forceinline__ void mask_transposed_scores(float (&x)[T::kNTilesS][4], const BackwardParams& p,
                                                       const Sm90BwdStep& s, int k0, int q0, int wg, int t) {
  // Read where it is used: a flag kept from the step's start to here cost ptxas 12-24 bytes of
  // spills at d = 128 with the work in shared memory.
  if constexpr (sm90_bwd_work_in_smem<T>()) {
    if (work_slot(wg).full_tile(s.m_block)) return;
  } else {
    if (s.full_tile) return;
  }
  const SequenceMask mask = step_mask<T>(p, s);
  int lo[2], hi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    visible_queries(mask, k0 + T::kWgKeyRows * wg + sm90_layout::acc_row(t, 2 * h), lo[h], hi[h]);
    lo[h] -= q0 + sm90_layout::acc_col(t, 0, 0);
    hi[h] -= q0 + sm90_layout::acc_col(t, 0, 0);
  }
#pragma unroll
  for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = 8 * nt + e % 2;
      if (c < lo[e / 2] || c > hi[e / 2]) x[nt][e] = -INFINITY;
    }
}

// P^T and dS^T of one step in place of acc_s and acc_dp, packed into the A fragments of the dV
// and dK GEMMs, in short passes (each keeps few values live beside the 192 accumulator
// registers). Without soft-cap the logits, mask and exponentials run while dP^T is still on the
// tensor cores (the caller waits for S^T alone); with it both are waited for first, and the
// first pass leaves (dP^T - D) (1 - tanh^2) in acc_dp, so no tanh is kept.
// after_first_wait runs once the step's first wait returned (every wgmma group issued before
// S^T, such as the dk_last order's dK of the previous step, is then complete).
template <class T, bool kSoftcap, class AfterFirstWait>
__device__ __forceinline__ void scores_to_gradients(float (&acc_s)[T::kNTilesS][4], float (&acc_dp)[T::kNTilesS][4],
                                                    uint32_t (&a_p)[T::kKStepsS][4], uint32_t (&a_ds)[T::kKStepsS][4],
                                                    const BackwardParams& p, uint32_t s_lse, uint32_t s_dsum,
                                                    const Sm90BwdStep& s, int k0, int q0, int wg, int t,
                                                    AfterFirstWait&& after_first_wait) {
  using E = typename T::Element;
  if constexpr (!kSoftcap) {
    sm90::warpgroup_wait<1>();  // S^T landed; dP^T may still run
    after_first_wait();
    sm90::fence_registers(acc_s);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt) {
      const float2 l = ld_shared_f32x2(s_lse + sm90_layout::acc_col(t, nt, 0) * 4);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = fmaf(acc_s[nt][e], p.scale_log2, -(e % 2 == 0 ? l.x : l.y));
    }
    mask_transposed_scores<T>(acc_s, p, s, k0, q0, wg, t);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = exp2_ftz(acc_s[nt][e]);
    sm90::warpgroup_wait<0>();
    sm90::fence_registers(acc_dp);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt) {
      const float2 d = ld_shared_f32x2(s_dsum + sm90_layout::acc_col(t, nt, 0) * 4);
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dp[nt][e] = acc_s[nt][e] * (acc_dp[nt][e] - (e % 2 == 0 ? d.x : d.y));
    }
  } else {
    sm90::warpgroup_wait<0>();
    after_first_wait();
    sm90::fence_registers(acc_s);
    sm90::fence_registers(acc_dp);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt) {
      const float2 l = ld_shared_f32x2(s_lse + sm90_layout::acc_col(t, nt, 0) * 4);
      const float2 d = ld_shared_f32x2(s_dsum + sm90_layout::acc_col(t, nt, 0) * 4);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float th = tanhf(acc_s[nt][e] * p.softcap_pre_scale);
        acc_s[nt][e] = fmaf(p.softcap * th, p.scale_log2, -(e % 2 == 0 ? l.x : l.y));
        acc_dp[nt][e] = (acc_dp[nt][e] - (e % 2 == 0 ? d.x : d.y)) * (1.0f - th * th);
      }
    }
    mask_transposed_scores<T>(acc_s, p, s, k0, q0, wg, t);
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc_s[nt][e] = exp2_ftz(acc_s[nt][e]);
        acc_dp[nt][e] *= acc_s[nt][e];
      }
  }
#pragma unroll
  for (int kp = 0; kp < T::kKStepsS; ++kp)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int nt = sm90_layout::pack_slice(kp, r), e = sm90_layout::pack_element(r, 0);
      a_p[kp][r] = sm80::pack2<E>(acc_s[nt][e], acc_s[nt][e + 1]);
      a_ds[kp][r] = sm80::pack2<E>(acc_dp[nt][e], acc_dp[nt][e + 1]);
    }
}

// dS^T (this warpgroup's 64 key rows) into the swizzled dS^T buffer: rows kWgKeyRows wg.. of a
// (kBlockN keys, kBlockM queries) tile (d = 256: both warpgroups hold the same 64 rows, and
// warpgroup wg stores the query columns of A fragments kp in [wg, wg + 1) * kKStepsS / 2), one
// stmatrix.x4 per A fragment (its four registers are four 8x8 matrices; each lane gives one
// 16-byte row address, layout.hpp: stmatrix_row/col; the 8 rows of a matrix sit at 8 different
// chunk positions of the swizzle, so no bank conflict).
// Then the proxy fence that orders the stores before the dQ wgmma's reads of them.
template <class T>
__device__ __forceinline__ void store_ds(uint32_t s_ds, const uint32_t (&a_ds)[T::kKStepsS][4], int wg, int t) {
  asm volatile("" : "+r"(t), "+r"(s_ds));  // the addresses are computed here, not early in the step
  const int lane = t % 32;
  const int row = T::kWgKeyRows * wg + sm90_layout::stmatrix_row(t, lane);
#pragma unroll
  for (int kp = 0; kp < T::kKStepsS; ++kp) {
    if (T::kSplitColumns && kp / (T::kKStepsS / T::kMmaWarpgroups) != wg) continue;
    const uint32_t addr = s_ds + sm90_layout::sw128_offset(T::kBlockN, row, sm90_layout::stmatrix_col(kp, lane));
    sm90::stmatrix_x4(addr, a_ds[kp][0], a_ds[kp][1], a_ds[kp][2], a_ds[kp][3]);
  }
  sm90::fence_proxy_async_shared();
}

// Varlen only (T::kVarlen). TMA rows do not stop at a sequence's end: the packed [total tokens,
// heads, d] maps load the next sequence's tokens into a tile's rows past it (zeros only past
// the last token). The mask makes P and dS 0 there (keys: -inf scores; queries: lse +inf, D 0),
// but 0 x inf is NaN, so a non-finite value in the next sequence would reach this one's
// gradients: dP^T = V dO^T on a key row past the end (dS = 0 x inf), dQ += dS K through K's
// rows past it, dV += P^T dO and dK += dS^T Q through a query row past it; and a non-finite Q
// or K row makes S^T NaN, which the mask replaces on key rows but not on query columns (there
// P = exp2(NaN - inf) = NaN). So those rows of K, V (once per CTA) and of Q, dO
// (the stage of a sequence's last query block) are zeroed in shared memory before any wgmma
// reads them, as the forward zeroes V (flash_fwd_sm90/consumer.cuh: zero_v_rows_past_end).
//
// Rows [first_row, kRows) of a landed 16-bit tile (kRows, kSmemCols), 128-byte swizzled in
// kPanels panels of kRows rows (layout.hpp: sw128_offset, the layout TMA writes): every MMA
// thread (tid in [0, kMmaThreads)) stores whole 16-byte chunks; a row's kPanels * 8 chunks sit
// at permuted places within it, and all of them are zeroed (d = 96: the zero padding too).
template <class T, int kRows>
__device__ __forceinline__ void zero_tile_rows(uint32_t tile, int first_row, int tid) {
  constexpr uint32_t kChunks = T::kPanels * 8;  // 16-byte chunks of a row (a power of two)
#pragma unroll 1  // at most kRows * kChunks / kMmaThreads rounds, once per CTA or block: kept small
  for (uint32_t idx = first_row * kChunks + tid; idx < kRows * kChunks; idx += T::kMmaThreads) {
    const int row = static_cast<int>(idx / kChunks), chunk = static_cast<int>(idx % kChunks);
    const uint32_t at = tile + sm90_layout::sw128_offset(kRows, row, chunk * 8);
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0u) : "memory");
  }
}
// The zeros are read by both MMA warpgroups' wgmma (the async proxy): each thread fences its
// stores, then both warpgroups meet (every MMA thread calls this, or none: the conditions
// depend only on the CTA's sequence and the step).
template <class T>
__device__ __forceinline__ void publish_zeroed_rows() {
  sm90::fence_proxy_async_shared();
  sm90::named_barrier_sync(kBarRowsZeroed, T::kMmaThreads);
}
// After kv_full, before the first step: the key rows past len_k of the CTA's block.
// sK, sV: (kBlockN, kSmemCols) bf16 / f16 each, 128-byte swizzled, kPanels panels.
template <class T>
__device__ __forceinline__ void zero_key_rows_past_end(const Sm90BwdSmem<T>& smem, int k0, int len_k, int tid) {
  static_assert(T::kVarlen, "varlen kernels only");
  if (k0 + T::kBlockN <= len_k) return;
  zero_tile_rows<T, T::kBlockN>(smem.k(), len_k - k0, tid);
  zero_tile_rows<T, T::kBlockN>(smem.v(), len_k - k0, tid);
  publish_zeroed_rows<T>();
}
// After the step's q_full, before its GEMMs (the stage is released to the producer only after
// dV/dK read it, so the zeros are not overwritten under the GEMMs): the query rows past len_q
// of the sequence's last query block, the only one that crosses its end.
// sQ[stage], sdO[stage]: (kBlockM, kSmemCols) each, 128-byte swizzled, kPanels panels.
template <class T>
__device__ __forceinline__ void zero_query_rows_past_end(const Sm90BwdSmem<T>& smem, const Sm90BwdStep& s, int tid) {
  static_assert(T::kVarlen, "varlen kernels only");
  if (s.q0 + T::kBlockM <= s.len_q) return;
  zero_tile_rows<T, T::kBlockM>(smem.q(s.stage), s.len_q - s.q0, tid);
  zero_tile_rows<T, T::kBlockM>(smem.dout(s.stage), s.len_q - s.q0, tid);
  publish_zeroed_rows<T>();
}

// One step's GEMMs and gradients up to the dQ tile (the caller hands acc_dq to dq_writer.cuh).
// Waits for the step's stage (varlen: zeroes its rows past the sequence), releases it once dV
// and dK have read Q and dO (dk_last order: in the next step, finish_steps after the last).
template <class T, bool kSoftcap>
__device__ __forceinline__ void mma_step(Sm90BwdMmaState<T>& st, float (&acc_dq)[T::kDqN / 8][4],
                                         const Sm90BwdSmem<T>& smem, const BackwardParams& p, int k0,
                                         const Sm90BwdStep& s, int wg, int t) {
  constexpr bool kDkLast = sm90_bwd_dk_last<T>();
  sm90::mbarrier_wait(smem.q_full(s.stage), s.parity);
  if constexpr (T::kVarlen) zero_query_rows_past_end<T>(smem, s, 128 * wg + t);
  float acc_s[T::kNTilesS][4], acc_dp[T::kNTilesS][4];
  sm90::warpgroup_fence();
  issue_transposed_scores<T>(acc_s, smem.k(), smem.q(s.stage), wg);
  issue_transposed_scores<T>(acc_dp, smem.v(), smem.dout(s.stage), wg);

  uint32_t a_p[T::kKStepsS][4], a_ds_step[T::kKStepsS][4];
  uint32_t(&a_ds)[T::kKStepsS][4] = kDkLast ? st.a_ds : a_ds_step;
  // dk_last: the first wait retired the previous step's dK; its stage goes back to the producer.
  auto release_previous = [&] {
    if constexpr (kDkLast) {
      sm90::fence_registers(st.acc_dk);
      sm90::fence_registers(st.a_ds);
      if (s.index > 0) sm90::mbarrier_arrive(smem.q_empty((s.stage + T::kStages - 1) % T::kStages));
    }
  };
  scores_to_gradients<T, kSoftcap>(acc_s, acc_dp, a_p, a_ds, p, smem.lse(s.stage), smem.dsum(s.stage), s, k0, s.q0, wg,
                                   t, release_previous);
  store_ds<T>(smem.ds(s.ds_buffer), a_ds, wg, t);

  sm90::fence_registers(st.acc_dv);
  sm90::fence_registers(st.acc_dk);
  sm90::fence_registers(a_p);
  sm90::fence_registers(a_ds);
  if constexpr (kDkLast) {
    // dV += P^T dO; both warpgroups' dS^T rows; dQ = dS K; dK += dS^T Q (three commit groups).
    sm90::warpgroup_fence();
    issue_key_gradient<T>(st.acc_dv, a_p, smem.dout(s.stage), wg);
    sm90::warpgroup_commit();
    sm90::named_barrier_sync(kBarDsReady, T::kMmaThreads);
    sm90::warpgroup_fence();
    issue_dq<T>(acc_dq, smem.ds(s.ds_buffer), smem.k(), wg);
    sm90::warpgroup_fence();
    issue_key_gradient<T>(st.acc_dk, a_ds, smem.q(s.stage), wg);
    sm90::warpgroup_commit();
    sm90::warpgroup_wait<1>();  // dV and dQ done; dK runs on
    sm90::fence_registers(st.acc_dv);
    sm90::fence_registers(a_p);
    sm90::fence_registers(acc_dq);
    return;
  }
  // dV += P^T dO, dK += dS^T Q: one commit group. The packing is final before the fence (pins).
  sm90::warpgroup_fence();
  issue_key_gradient<T>(st.acc_dv, a_p, smem.dout(s.stage), wg);
  issue_key_gradient<T>(st.acc_dk, a_ds, smem.q(s.stage), wg);
  sm90::warpgroup_commit();

  sm90::named_barrier_sync(kBarDsReady, T::kMmaThreads);  // the other warpgroup's dS^T rows landed
  if constexpr (T::kSplitColumns) {
    // d = 256: dV/dK finish before the dQ GEMM starts, so P^T and dS^T (32 registers) are dead
    // by the time the 64 of acc_dq (n128) are live; with both in flight ptxas serialised the
    // wgmma for lack of registers (C7512). The other warpgroup's GEMMs fill the gap.
    sm90::warpgroup_wait<0>();
    sm90::fence_registers(st.acc_dv);
    sm90::fence_registers(st.acc_dk);
    sm90::fence_registers(a_p);
    sm90::fence_registers(a_ds);
    sm90::mbarrier_arrive(smem.q_empty(s.stage));
  }
  sm90::warpgroup_fence();  // each batch its own fence (else ptxas serialises, C7519)
  issue_dq<T>(acc_dq, smem.ds(s.ds_buffer), smem.k(), wg);
  if constexpr (!T::kSplitColumns) {
    sm90::warpgroup_wait<1>();  // dV, dK done: Q and dO of this stage are free
    sm90::fence_registers(st.acc_dv);
    sm90::fence_registers(st.acc_dk);
    sm90::fence_registers(a_p);
    sm90::fence_registers(a_ds);
    sm90::mbarrier_arrive(smem.q_empty(s.stage));
  }
  sm90::warpgroup_wait<0>();
  sm90::fence_registers(acc_dq);
}

// After the last step: the dk_last order's last dK is complete before the epilogue reads acc_dk.
template <class T>
__device__ __forceinline__ void finish_steps(Sm90BwdMmaState<T>& st) {
  if constexpr (sm90_bwd_dk_last<T>()) {
    sm90::warpgroup_wait<0>();
    sm90::fence_registers(st.acc_dk);
    sm90::fence_registers(st.a_ds);
  }
}

}  // namespace fastattn::cuda
