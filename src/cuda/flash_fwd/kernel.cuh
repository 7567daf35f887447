// kernel.cuh — the FlashAttention-2 forward kernel: one CTA per (query block, head, batch), or
// per (key split, query block, head, batch) in split-KV mode.
//
// Roles, in order: tile scheduler (which block a CTA owns), global->shared copy, main loop
// (S = Q K^T, mask, online softmax, O += P V), epilogue (O / l, lse; or the split's f32
// partials). The MMA atom, the shared-memory layout, the global -> shared copy and the
// accumulator fragment coordinates are the per-architecture parts, one policy type T::Arch:
// Sm80Forward (sm80/forward_arch.cuh: m16n8k16, ldmatrix, cp.async), Sm75Forward
// (sm75/forward_arch.cuh: m16n8k8, ldmatrix, register-staged prefetch) and Sm70Forward
// (sm70/forward_arch.cuh: m8n8k4 quad pairs, ld.shared on padded rows, register-staged
// prefetch). tile_ops.cuh (tile steps, mask), softmax.cuh and epilogue.cuh are shared.
//
// Pipeline (FlashAttention-2, Dao 2023, Algorithm 1 with the flash-attn 2.x load order): key
// tiles are visited from the last to the first, so the masked diagonal tiles come first. The V
// tile loads while S = Q K^T runs; the next K tile loads while O += P V runs.
//
// kSplit (heuristics.hpp chooses it): the query block's key tiles [n_begin, n_end) are cut into
// num_splits equal ranges and this CTA walks one; its epilogue writes f32 partials that
// flash_combine_kernel (combine.cuh) merges. kSplit = false compiles to the plain kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/epilogue.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/flash_fwd/traits.cuh"
#include "cuda/sm70/forward_arch.cuh"
#include "cuda/sm75/forward_arch.cuh"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/forward_arch.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Cuts the key tiles [n_begin, n_end) of a query block into `num_splits` ranges of
// ceil(count / num_splits) tiles and keeps range `split` (empty for trailing splits when the
// count does not divide). Splitting the block's own visible range, not [0, seqlen_k), keeps the
// splits balanced under causal and window masks.
__device__ __forceinline__ void split_key_range(int& n_begin, int& n_end, int split, int num_splits) {
  const int per_split = (n_end - n_begin + num_splits - 1) / num_splits;
  const int lo = min(n_end, n_begin + split * per_split);
  n_end = min(n_end, lo + per_split);
  n_begin = lo;
}

// S = Q K^T and O += P V with the arch's operand loads and MMA atom.
template <class T>
__device__ __forceinline__ void arch_gemm_qk(float (&acc_s)[T::kMTiles][T::kNTilesS][4], uint32_t sQ, uint32_t sK,
                                             int warp_row0, int lane) {
  if constexpr (!T::Arch::kQuadPairs) {
    gemm_qk<T>(acc_s, sQ, sK, warp_row0, lane);
  } else {
    sm70::gemm_qk<T>(acc_s, sQ, sK, warp_row0, lane);
  }
}
template <class T>
__device__ __forceinline__ void arch_gemm_pv(float (&acc_o)[T::kMTiles][T::kNTilesO][4],
                                             const float (&p)[T::kMTiles][T::kNTilesS][4], uint32_t sV, int lane) {
  if constexpr (!T::Arch::kQuadPairs) {
    gemm_pv<T>(acc_o, p, sV, lane);
  } else {
    sm70::gemm_pv<T>(acc_o, p, sV, lane);
  }
}

template <class T, bool kSoftcap, bool kSplit>
__global__ void __launch_bounds__(T::kThreads, 2) flash_forward_kernel(const ForwardParams p) {
  using E = typename T::Element;
  using A = typename T::Arch;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = sm80::smem_address(smem);
  const uint32_t sK = sQ + T::kSmemQ;
  const uint32_t sV = sK + T::kSmemK;

  // ---- tile scheduler: heaviest (last) query blocks first, for causal load balance ---------
  // Split-KV: blockIdx.x = (reversed query block) * num_splits + split.
  const int num_splits = kSplit ? p.num_splits : 1;
  const int split = kSplit ? static_cast<int>(blockIdx.x) % num_splits : 0;
  const int m_block = kSplit ? static_cast<int>(gridDim.x) / num_splits - 1 - static_cast<int>(blockIdx.x) / num_splits
                             : static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
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
  int n_begin = static_cast<int>(key_begin / T::kBlockN);
  int n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;
  if constexpr (kSplit) split_key_range(n_begin, n_end, split, num_splits);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row0 = warp * T::kWarpRows;

  float acc_o[T::kMTiles][T::kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kNTilesO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][nt][e] = 0.0f;
  OnlineSoftmax<2 * T::kMTiles, T::kNTilesS, A::kRowLaneMask> softmax;
  softmax.init();
  // sm80: cp.async (stateless); sm75/sm70: the registers of the tile in flight.
  typename A::template Pipe<T> pipe;

  // ---- main loop ------------------------------------------------------------------------------
  if (n_begin < n_end) {
    pipe.issue_q(sQ, q_ptr, p.q_token_stride, q1 - q0);
    const int last = n_end - 1;
    pipe.template issue<T::kBlockN>(sK, k_ptr + static_cast<int64_t>(last) * T::kBlockN * p.k_token_stride,
                                    p.k_token_stride, len_k - last * T::kBlockN);
    pipe.commit();
  }
  for (int n = n_end - 1; n >= n_begin; --n) {
    const int k0 = n * T::kBlockN;
    // Full tiles skip the mask arithmetic; anything else (partial, or defensively empty) masks.
    const bool masked = mask.classify(q0, q1, k0, k0 + T::kBlockN) != TileClass::full;

    pipe.land();
    __syncthreads();  // K[n] landed; every warp is done with V[n + 1]
    pipe.template issue<T::kBlockN>(sV, v_ptr + static_cast<int64_t>(k0) * p.v_token_stride, p.v_token_stride,
                                    len_k - k0);
    pipe.commit();

    float acc_s[T::kMTiles][T::kNTilesS][4];
    arch_gemm_qk<T>(acc_s, sQ, sK, warp_row0, lane);

    scale_and_mask<T, kSoftcap>(acc_s, p, masked, q0 + warp_row0, k0, len_k, diagonal, window_left, window_right,
                                lane);

    float rescale[2 * T::kMTiles];
    softmax.update(acc_s, rescale, fabsf(p.scale_log2));
    // Once the running maxima settle, most tiles leave every row's max unchanged (factor exactly
    // exp2(0) = 1): the warp then skips the kMTiles x head_dim multiplies, which sit between the
    // softmax and O += P V.
    bool max_moved = false;
#pragma unroll
    for (int r = 0; r < 2 * T::kMTiles; ++r) max_moved |= rescale[r] != 1.0f;
    if (__any_sync(0xffffffffu, max_moved)) rescale_output<T>(acc_o, rescale);

    pipe.land();
    __syncthreads();  // V[n] landed; every warp is done with K[n]
    if (n > n_begin) {
      const int kn = (n - 1) * T::kBlockN;
      pipe.template issue<T::kBlockN>(sK, k_ptr + static_cast<int64_t>(kn) * p.k_token_stride, p.k_token_stride,
                                      len_k - kn);
      pipe.commit();
    }
    arch_gemm_pv<T>(acc_o, acc_s, sV, lane);
  }

  // ---- epilogue: O / l and lse (rows that saw no key get 0 and -inf), or the split's partials
  float inv_sum[2 * T::kMTiles], lse[2 * T::kMTiles];
  softmax.finalize(inv_sum, lse);
  if constexpr (kSplit) {
    // The split index re-read from blockIdx rather than kept live through the main loop.
    const RowBlock rows{varlen, q_start, batch, head, q0, len_q};
    store_partial<T>(p, rows, static_cast<int>(blockIdx.x) % p.num_splits, acc_o, inv_sum, lse, warp_row0, lane);
  } else {
    // store_output (epilogue.cuh) inlined by hand: through the helper ptxas spills 16 more
    // bytes at d = 128 (255 registers either way).
    E* o_ptr = static_cast<E*>(p.out) + (varlen ? q_start * p.o_token_stride : batch * p.o_batch_stride) +
               head * p.o_head_stride;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = q0 + warp_row0 + mt * A::kTileRows + A::lane_row(lane) + half * A::kHalfRows;
        if (row >= len_q) continue;
        const float inv = inv_sum[2 * mt + half];
        E* o_row = o_ptr + static_cast<int64_t>(row) * p.o_token_stride + A::lane_col(lane);
#pragma unroll
        for (int nt = 0; nt < T::kNTilesO; ++nt) {
          *reinterpret_cast<uint32_t*>(o_row + nt * A::kFragCols) =
              sm80::pack2<E>(acc_o[mt][nt][2 * half] * inv, acc_o[mt][nt][2 * half + 1] * inv);
        }
        if (p.lse != nullptr && A::row_leader(lane)) {
          float* lse_ptr = p.lse + (varlen ? (q_start + row) * p.lse_token_stride
                                           : batch * p.lse_batch_stride + row * p.lse_token_stride) +
                           head * p.lse_head_stride;
          *lse_ptr = lse[2 * mt + half];
        }
      }
  }
}

}  // namespace fastattn::cuda
