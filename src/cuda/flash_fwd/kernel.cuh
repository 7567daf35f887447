// kernel.cuh — the FlashAttention-2 forward kernel: one CTA per (query block, head, batch).
//
// Roles, in order: tile scheduler (which block a CTA owns), global->shared copy, main loop
// (S = Q K^T, mask, online softmax, O += P V), epilogue (O / l, lse). The MMA atom
// (sm80/mma.cuh), the copy (sm80/copy.cuh) and the shared-memory layout (common/smem_layout.cuh)
// are the per-architecture parts.
//
// Pipeline (FlashAttention-2, Dao 2023, Algorithm 1 with the flash-attn 2.x load order): key
// tiles are visited from the last to the first, so the masked diagonal tiles come first. The V
// tile loads while S = Q K^T runs; the next K tile loads while O += P V runs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/traits.cuh"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Copies a (kRows, kHeadDim) tile from global memory (rows token_stride apart) into a swizzled
// shared tile; rows at or past rows_valid are zero-filled so padded keys contribute 0 * 0.
template <class T, int kRows>
__device__ __forceinline__ void load_tile(uint32_t smem, const typename T::Element* gmem,
                                          int64_t token_stride, int rows_valid) {
  constexpr int kChunks = T::kHeadDim / 8;
#pragma unroll
  for (int idx = threadIdx.x; idx < kRows * kChunks; idx += T::kThreads) {
    const int row = idx / kChunks, chunk = idx % kChunks;
    const bool valid = row < rows_valid;
    const typename T::Element* src = valid ? gmem + row * token_stride + chunk * 8 : gmem;
    sm80::cp_async_16(smem + T::Layout::offset(row, chunk), src, valid);
  }
}

// acc_s (kMTiles x kNTilesS n8 tiles) = Q_warp K^T over the whole head_dim.
template <class T>
__device__ __forceinline__ void gemm_qk(float (&acc_s)[T::kMTiles][T::kNTilesS][4], uint32_t sQ,
                                        uint32_t sK, int warp_row0, int lane) {
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[mt][nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < T::kKStepsQK; ++kk) {
    uint32_t a[T::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
      sm80::ldmatrix_x4(a[mt], sQ + T::Layout::offset(warp_row0 + mt * 16 + (lane % 16), kk * 2 + lane / 16));
    }
#pragma unroll
    for (int np = 0; np < T::kNTilesS / 2; ++np) {
      uint32_t b[4];  // b[0..1]: n-tile 2np, b[2..3]: n-tile 2np + 1
      sm80::ldmatrix_x4(b, sK + T::Layout::offset(np * 16 + (lane / 16) * 8 + lane % 8, kk * 2 + (lane / 8) % 2));
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        sm80::mma_16816<typename T::Element>(acc_s[mt][2 * np], a[mt], b_lo);
        sm80::mma_16816<typename T::Element>(acc_s[mt][2 * np + 1], a[mt], b_hi);
      }
    }
  }
}

// acc_o (kMTiles x kNTilesO) += P V, with P taken from the S accumulators in registers.
template <class T>
__device__ __forceinline__ void gemm_pv(float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                        const float (&p)[T::kMTiles][T::kNTilesS][4], uint32_t sV,
                                        int lane) {
  using E = typename T::Element;
#pragma unroll
  for (int kp = 0; kp < T::kKStepsPV; ++kp) {
    uint32_t a[T::kMTiles][4];  // two S n8-tiles form one A k16-tile (see mma.cuh)
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) {
      a[mt][0] = sm80::pack2<E>(p[mt][2 * kp][0], p[mt][2 * kp][1]);
      a[mt][1] = sm80::pack2<E>(p[mt][2 * kp][2], p[mt][2 * kp][3]);
      a[mt][2] = sm80::pack2<E>(p[mt][2 * kp + 1][0], p[mt][2 * kp + 1][1]);
      a[mt][3] = sm80::pack2<E>(p[mt][2 * kp + 1][2], p[mt][2 * kp + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < T::kNTilesO / 2; ++dp) {
      uint32_t b[4];  // V is (keys, head_dim) row-major: the transposed load gives col-major B
      sm80::ldmatrix_x4_trans(b, sV + T::Layout::offset(kp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dp * 2 + lane / 16));
      const uint32_t b_lo[2] = {b[0], b[1]}, b_hi[2] = {b[2], b[3]};
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        sm80::mma_16816<E>(acc_o[mt][2 * dp], a[mt], b_lo);
        sm80::mma_16816<E>(acc_o[mt][2 * dp + 1], a[mt], b_hi);
      }
    }
  }
}

template <class T, bool kSoftcap>
__global__ void __launch_bounds__(T::kThreads, 2) flash_forward_kernel(const ForwardParams p) {
  using E = typename T::Element;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = sm80::smem_address(smem);
  const uint32_t sK = sQ + T::kSmemQ;
  const uint32_t sV = sK + T::kSmemK;

  // ---- tile scheduler: heaviest (last) query blocks first, for causal load balance ---------
  const int m_block = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
  const int head = blockIdx.y, batch = blockIdx.z;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int64_t k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int len_q = varlen ? p.cu_seqlens_q[batch + 1] - static_cast<int>(q_start) : p.seqlen_q;
  const int len_k = varlen ? p.cu_seqlens_k[batch + 1] - static_cast<int>(k_start) : p.seqlen_k;
  const int q0 = m_block * T::kBlockM;
  if (q0 >= len_q) return;
  const int q1 = min(q0 + T::kBlockM, len_q);
  const int kv_head = head / p.group_size;

  const E* q_ptr = static_cast<const E*>(p.q) + (varlen ? q_start * p.q_token_stride : batch * p.q_batch_stride) +
                   head * p.q_head_stride + q0 * p.q_token_stride;
  const E* k_ptr = static_cast<const E*>(p.k) + (varlen ? k_start * p.k_token_stride : batch * p.k_batch_stride) +
                   kv_head * p.k_head_stride;
  const E* v_ptr = static_cast<const E*>(p.v) + (varlen ? k_start * p.v_token_stride : batch * p.v_batch_stride) +
                   kv_head * p.v_head_stride;

  SequenceMask mask;
  mask.left = p.window_left;
  mask.right = p.window_right;
  mask.offset = p.bottom_right ? len_k - len_q : 0;
  mask.seqlen_k = len_k;
  // 32-bit copies for the per-row mask interval; the host clamps windows to int range.
  const int diagonal = static_cast<int>(mask.offset);
  const int window_left = static_cast<int>(p.window_left);
  const int window_right = static_cast<int>(p.window_right);
  // Key tiles covering [key_begin, key_end): none when the window misses every key (both ends
  // clamp to the same position), else every tile in the range sees at least one pair.
  const int64_t key_begin = mask.key_begin(q0), key_end = mask.key_end(q1);
  const int n_begin = static_cast<int>(key_begin / T::kBlockN);
  const int n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row0 = warp * T::kWarpRows;

  float acc_o[T::kMTiles][T::kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nt][e] = 0.0f;
  OnlineSoftmax<2 * T::kMTiles, T::kNTilesS> softmax;
  softmax.init();

  // ---- main loop ------------------------------------------------------------------------------
  if (n_begin < n_end) {
    load_tile<T, T::kBlockM>(sQ, q_ptr, p.q_token_stride, q1 - q0);
    const int last = n_end - 1;
    load_tile<T, T::kBlockN>(sK, k_ptr + static_cast<int64_t>(last) * T::kBlockN * p.k_token_stride,
                             p.k_token_stride, len_k - last * T::kBlockN);
    sm80::cp_async_commit();
  }
  for (int n = n_end - 1; n >= n_begin; --n) {
    const int k0 = n * T::kBlockN;
    // Full tiles skip the mask arithmetic; anything else (partial, or defensively empty) masks.
    const bool masked = mask.classify(q0, q1, k0, k0 + T::kBlockN) != TileClass::full;

    sm80::cp_async_wait<0>();
    __syncthreads();  // K[n] landed; every warp is done with V[n + 1]
    load_tile<T, T::kBlockN>(sV, v_ptr + static_cast<int64_t>(k0) * p.v_token_stride, p.v_token_stride, len_k - k0);
    sm80::cp_async_commit();

    float acc_s[T::kMTiles][T::kNTilesS][4];
    gemm_qk<T>(acc_s, sQ, sK, warp_row0, lane);

    // Scores to the log2 domain, soft-cap, then mask (partial tiles only). For a partial tile
    // each row's visible keys are one interval [lo, hi] (mask.hpp), compared in 32 bits.
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int lo = 0, hi = len_k - 1;
        if (masked) {
          const int i = q0 + warp_row0 + mt * 16 + lane / 4 + half * 8;
          const long long d = static_cast<long long>(i) + diagonal;  // 64-bit: no overflow
          if (window_left >= 0) lo = static_cast<int>(max(0LL, d - window_left));
          if (window_right >= 0) hi = static_cast<int>(min(static_cast<long long>(hi), d + window_right));
        }
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            float s = acc_s[mt][nt][e];
            if constexpr (kSoftcap) s = p.softcap * tanhf(s * p.softcap_pre_scale);
            s *= p.scale_log2;
            if (masked) {
              const int j = k0 + nt * 8 + 2 * (lane % 4) + (e & 1);
              if (j < lo || j > hi) s = -INFINITY;
            }
            acc_s[mt][nt][e] = s;
          }
      }

    float rescale[2 * T::kMTiles];
    softmax.update(acc_s, rescale);
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        acc_o[mt][nt][0] *= rescale[2 * mt];
        acc_o[mt][nt][1] *= rescale[2 * mt];
        acc_o[mt][nt][2] *= rescale[2 * mt + 1];
        acc_o[mt][nt][3] *= rescale[2 * mt + 1];
      }

    sm80::cp_async_wait<0>();
    __syncthreads();  // V[n] landed; every warp is done with K[n]
    if (n > n_begin) {
      const int kn = (n - 1) * T::kBlockN;
      load_tile<T, T::kBlockN>(sK, k_ptr + static_cast<int64_t>(kn) * p.k_token_stride, p.k_token_stride, len_k - kn);
      sm80::cp_async_commit();
    }
    gemm_pv<T>(acc_o, acc_s, sV, lane);
  }

  // ---- epilogue: O / l and lse; rows that saw no key get 0 and -inf ---------------------------
  float inv_sum[2 * T::kMTiles], lse[2 * T::kMTiles];
  softmax.finalize(inv_sum, lse);
  E* o_ptr = static_cast<E*>(p.out) + (varlen ? q_start * p.o_token_stride : batch * p.o_batch_stride) +
             head * p.o_head_stride;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = q0 + warp_row0 + mt * 16 + lane / 4 + half * 8;
      if (row >= len_q) continue;
      const float inv = inv_sum[2 * mt + half];
      E* o_row = o_ptr + static_cast<int64_t>(row) * p.o_token_stride + 2 * (lane % 4);
#pragma unroll
      for (int nt = 0; nt < T::kNTilesO; ++nt) {
        *reinterpret_cast<uint32_t*>(o_row + nt * 8) =
            sm80::pack2<E>(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
      }
      if (p.lse != nullptr && lane % 4 == 0) {
        float* lse_ptr = p.lse + (varlen ? (q_start + row) * p.lse_token_stride
                                         : batch * p.lse_batch_stride + row * p.lse_token_stride) +
                         head * p.lse_head_stride;
        *lse_ptr = lse[2 * mt + half];
      }
    }
}

}  // namespace fastattn::cuda
