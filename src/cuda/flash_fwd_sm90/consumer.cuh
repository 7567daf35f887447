// consumer.cuh — one consumer warpgroup of the sm90 forward: 64 query rows, the whole key
// range of the tile (FlashAttention-2's loop, on wgmma).
//
// Per key tile (stage s, use u; producer.cuh):
//   wait k_full[s]; S = Q K^T: head_dim / 16 wgmma m64n{kBlockN}k16, both operands in shared
//   memory (SS), one commit group; wait for it
//   mask (partial tiles only, flash_fwd/tile_ops.cuh) and online softmax in registers
//   (flash_fwd/softmax.cuh: exp2 with the scale folded into one FFMA); O rescaled when a row
//   max moved
//   P to 16-bit in registers: two n8 fragments of S are one k16 A fragment (wgmma.cuh)
//   wait v_full[s]; O += P V: kBlockN / 16 wgmma m64n{head_dim}k16, A from registers (RS), V
//   MN-major (trans-b); wait; arrive on kv_empty[s]
// Not yet here (docs/cuda.md, next steps): issuing the next tile's Q K^T before this tile's
// softmax (intra-warpgroup overlap) and pingpong ordering of the two consumer warpgroups.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/flash_fwd_sm90/producer.cuh"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace fastattn::cuda {

template <class T>
struct Sm90ConsumerState {
  float acc_o[1][T::kNTilesO][4];  // O: (16 rows of this warp, kHeadDim) f32, m16n8 C layout
  OnlineSoftmax<2, T::kNTilesS> softmax;
};

// acc_s = Q_wg K^T: the warpgroup's 64 rows of Q (rows 64 * wg of sQ) against the stage's keys.
template <class T>
__device__ __forceinline__ void gemm_qk_sm90(float (&acc_s)[T::kNTilesS][4], uint32_t sQ, uint32_t sK, int wg) {
  using E = typename T::Element;
  sm90::warpgroup_fence();
#pragma unroll
  for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
    const int panel = kk / 4, chunk = kk % 4;  // 4 k16 steps per 128-byte row
    const uint64_t desc_q = sm90::kmajor_descriptor(sQ + panel * T::kPanelBytesQ + wg * 64 * 128 + chunk * 32);
    const uint64_t desc_k = sm90::kmajor_descriptor(sK + panel * T::kPanelBytesKV + chunk * 32);
    sm90::mma_ss<T::kBlockN, E>(acc_s, desc_q, desc_k, kk > 0 ? 1 : 0);
  }
  sm90::warpgroup_commit();
  sm90::warpgroup_wait<0>();
  sm90::fence_registers(acc_s);
}

// acc_o += P V with P (the softmax's output, f32 in the S layout) packed to 16-bit A fragments.
template <class T>
__device__ __forceinline__ void gemm_pv_sm90(float (&acc_o)[T::kNTilesO][4], const float (&p)[T::kNTilesS][4],
                                             uint32_t sV) {
  using E = typename T::Element;
  uint32_t a[T::kBlockN / 16][4];
#pragma unroll
  for (int kp = 0; kp < T::kBlockN / 16; ++kp) {
    a[kp][0] = sm80::pack2<E>(p[2 * kp][0], p[2 * kp][1]);
    a[kp][1] = sm80::pack2<E>(p[2 * kp][2], p[2 * kp][3]);
    a[kp][2] = sm80::pack2<E>(p[2 * kp + 1][0], p[2 * kp + 1][1]);
    a[kp][3] = sm80::pack2<E>(p[2 * kp + 1][2], p[2 * kp + 1][3]);
  }
  sm90::warpgroup_fence();
  sm90::fence_registers(acc_o);
#pragma unroll
  for (int kp = 0; kp < T::kBlockN / 16; ++kp) {
    // 16 keys = two 8-row swizzle atoms (2048 bytes) further into every panel.
    const uint64_t desc_v = sm90::mnmajor_descriptor(sV + kp * 16 * 128, T::kPanelBytesKV);
    sm90::mma_rs_tb<T::kHeadDim, E>(acc_o, a[kp], desc_v, 1);
  }
  sm90::warpgroup_commit();
  sm90::warpgroup_wait<0>();
  sm90::fence_registers(acc_o);
  sm90::fence_registers(a);
}

// The main loop of consumer warpgroup `wg` (0-based among the consumers).
template <class T, bool kSoftcap>
__device__ __forceinline__ void consume(Sm90ConsumerState<T>& st, const Sm90Smem<T>& smem, const ForwardParams& p,
                                        const Sm90TileWork& w, int wg, int warp_in_wg, int lane) {
  using Tile = typename T::WarpTile;
  clear_accumulator(st.acc_o);
  st.softmax.init();
  if (w.n_begin >= w.n_end) return;
  const int q_row0 = w.q0 + wg * 64 + warp_in_wg * 16;  // this warp's first row
  const int diagonal = static_cast<int>(w.mask.offset);
  const int window_left = static_cast<int>(p.window_left);
  const int window_right = static_cast<int>(p.window_right);
  const float exp_scale = fabsf(p.scale_log2);
  sm90::mbarrier_wait(smem.q_full(), 0);
  const int tiles = w.n_end - w.n_begin;
  for (int i = 0; i < tiles; ++i) {
    const int stage = i % T::kStages;
    const uint32_t parity = (i / T::kStages) & 1;
    const int k0 = (w.n_end - 1 - i) * T::kBlockN;
    const bool masked = w.mask.classify(w.q0, w.q1, k0, k0 + T::kBlockN) != TileClass::full;

    sm90::mbarrier_wait(smem.k_full(stage), parity);
    float acc_s[1][T::kNTilesS][4];
    gemm_qk_sm90<T>(acc_s[0], smem.q(), smem.k(stage), wg);

    scale_and_mask<Tile, kSoftcap>(acc_s, p, masked, q_row0, k0, w.len_k, diagonal, window_left, window_right, lane);
    float rescale[2];
    st.softmax.update(acc_s, rescale, exp_scale);
    if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        st.acc_o[0][nt][0] *= rescale[0];
        st.acc_o[0][nt][1] *= rescale[0];
        st.acc_o[0][nt][2] *= rescale[1];
        st.acc_o[0][nt][3] *= rescale[1];
      }
    }

    sm90::mbarrier_wait(smem.v_full(stage), parity);
    gemm_pv_sm90<T>(st.acc_o[0], acc_s[0], smem.v(stage));
    sm90::mbarrier_arrive(smem.kv_empty(stage));
  }
}

}  // namespace fastattn::cuda
