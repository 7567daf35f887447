// kernel_decode.cuh — the forward kernel for short queries (seqlen_q <= 16: decode, speculative
// decoding): one warp per CTA owns one 16-row MMA tile of queries of one (head, batch), and in
// split-KV mode one key split of it.
//
// Why a separate kernel: at seqlen_q <= 16 the main kernel's 128-row block would spend 8x the
// tensor-core work on padding rows, and its single K/V buffer keeps only one tile in flight per
// CTA. Decode is a pure stream of K and V (each byte used by <= 16 query rows), so what matters
// is bytes in flight per SM (docs/cuda.md, "Split-KV and decode"): this kernel keeps a ring of
// kStages (K, V) buffers and issues tile i + kStages - 1 before it waits for tile i, so up to
// kStages tiles of K and V (64 KiB at kStages = 2) are in flight per CTA, and a one-warp CTA of
// ~68 KiB shared memory lets three CTAs share an SM.
//
// The tile steps (S = Q K^T, mask, online softmax, O += P V) and the epilogues are the main
// kernel's (tile_ops.cuh, softmax.cuh, epilogue.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/epilogue.cuh"
#include "cuda/flash_fwd/kernel.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/flash_fwd/traits.cuh"
#include "cuda/sm80/copy.cuh"

namespace fastattn::cuda {

// Shared memory (T::kSmemBytes):
//   sQ:            (kBlockM, kSmemRowElems) 16-bit, swizzled
//   stage s:       sK (kBlockN, kSmemRowElems), then sV (kBlockN, kSmemRowElems), swizzled,
//                  at sQ + kSmemQ + s * kSmemStage
template <class T, bool kSoftcap, bool kSplit>
__global__ void __launch_bounds__(T::kThreads) flash_decode_kernel(const ForwardParams p) {
  using E = typename T::Element;
  static_assert(T::kStages >= 2, "the ring needs a buffer to load into while one is read");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = sm80::smem_address(smem);
  const uint32_t sStages = sQ + T::kSmemQ;

  // ---- tile scheduler: blockIdx.x = query block * num_splits + split --------------------------
  const int num_splits = kSplit ? p.num_splits : 1;
  const int split = kSplit ? static_cast<int>(blockIdx.x) % num_splits : 0;
  const int m_block = static_cast<int>(blockIdx.x) / num_splits;
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
  const int diagonal = static_cast<int>(mask.offset);  // the host clamps windows to int range
  const int window_left = static_cast<int>(p.window_left);
  const int window_right = static_cast<int>(p.window_right);
  const int64_t key_begin = mask.key_begin(q0), key_end = mask.key_end(q1);
  int n_begin = static_cast<int>(key_begin / T::kBlockN);
  int n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : n_begin;
  if constexpr (kSplit) split_key_range(n_begin, n_end, split, num_splits);
  const int n_tiles = n_end - n_begin;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_row0 = warp * T::kWarpRows;

  float acc_o[T::kMTiles][T::kNTilesO][4];
  clear_output<T>(acc_o);
  OnlineSoftmax<2 * T::kMTiles, T::kNTilesS> softmax;
  softmax.init();

  // Tile i of this CTA is key tile n_end - 1 - i (last to first, as the main kernel: the
  // masked diagonal tile first), held in stage i % kStages.
  auto load_kv = [&](int i) {
    const int k0 = (n_end - 1 - i) * T::kBlockN;
    const uint32_t sK = sStages + (i % T::kStages) * T::kSmemStage;
    load_tile<T, T::kBlockN>(sK, k_ptr + static_cast<int64_t>(k0) * p.k_token_stride, p.k_token_stride, len_k - k0);
    load_tile<T, T::kBlockN>(sK + T::kSmemK, v_ptr + static_cast<int64_t>(k0) * p.v_token_stride, p.v_token_stride,
                             len_k - k0);
  };

  // ---- prologue: Q and tiles 0 .. kStages - 2, one commit group per tile ----------------------
  // Groups are committed even when empty, so "tile i landed" is always "all but the newest
  // kStages - 1 groups done" (cp.async.wait_group counts groups, not bytes).
  if (n_tiles > 0) {
    load_tile<T, T::kBlockM>(sQ, q_ptr, p.q_token_stride, q1 - q0);
    load_kv(0);
  }
  sm80::cp_async_commit();
#pragma unroll
  for (int i = 1; i < T::kStages - 1; ++i) {
    if (i < n_tiles) load_kv(i);
    sm80::cp_async_commit();
  }

  // ---- main loop ------------------------------------------------------------------------------
  for (int i = 0; i < n_tiles; ++i) {
    // Tile i + kStages - 1 goes into the stage tile i - 1 used; the barrier at the end of the
    // previous iteration made every warp done with it.
    if (i + T::kStages - 1 < n_tiles) load_kv(i + T::kStages - 1);
    sm80::cp_async_commit();
    sm80::cp_async_wait<T::kStages - 1>();
    __syncthreads();  // tile i (and Q) landed, for every thread's copies

    const int k0 = (n_end - 1 - i) * T::kBlockN;
    const uint32_t sK = sStages + (i % T::kStages) * T::kSmemStage;
    const bool masked = mask.classify(q0, q1, k0, k0 + T::kBlockN) != TileClass::full;

    float acc_s[T::kMTiles][T::kNTilesS][4];
    gemm_qk<T>(acc_s, sQ, sK, warp_row0, lane);
    scale_and_mask<T, kSoftcap>(acc_s, p, masked, q0 + warp_row0, k0, len_k, diagonal, window_left, window_right,
                                lane);
    float rescale[2 * T::kMTiles];
    softmax.update(acc_s, rescale, fabsf(p.scale_log2));
    rescale_output<T>(acc_o, rescale);
    gemm_pv<T>(acc_o, acc_s, sK + T::kSmemK, lane);
    __syncthreads();  // every warp is done with stage i % kStages before it is refilled
  }
  sm80::cp_async_wait<0>();  // only empty groups remain; leave none behind at exit

  // ---- epilogue ---------------------------------------------------------------------------------
  float inv_sum[2 * T::kMTiles], lse[2 * T::kMTiles];
  softmax.finalize(inv_sum, lse);
  const RowBlock rows{varlen, q_start, batch, head, q0, len_q};
  if constexpr (kSplit) {
    store_partial<T>(p, rows, split, acc_o, inv_sum, lse, warp_row0, lane);
  } else {
    store_output<T>(p, rows, acc_o, inv_sum, lse, warp_row0, lane);
  }
}

}  // namespace fastattn::cuda
