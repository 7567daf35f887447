// kernel.cuh — the FlashAttention-2 backward kernel: one CTA per (key block, KV head, batch),
// parallel over key blocks (Dao 2023, Algorithm 2; flash-attn 2's sm80 backward).
//
// Roles, in order: scheduler (which key block and which query blocks see it), global->shared
// copy, main loop over the query blocks of every query head sharing the KV head (recompute
// S = Q K^T and P from lse; dP = dO V^T; dS = P * (dP - D); dV += P^T dO; dK += dS^T Q;
// dQ += dS K into fp32), epilogue (dK, dV). The per-arch parts come from T::Arch: MMA atom,
// global->shared copy, shared-memory layout and the accumulator's fragment coordinates
// (sm80/backward_arch.cuh: m16n8k16, cp.async, swizzled rows; sm75/backward_arch.cuh: two
// m16n8k8, synchronous copies; sm70/backward_arch.cuh: m8n8k4 quad pairs with ld.shared operands
// from padded rows, whose GEMMs and P/dS stores the kernel calls where T::Arch::kQuadPairs).
// The scheduler, the mask, P/dS math, the dQ reductions and the epilogue read fragments only
// through T::Arch, so they are one code for all three.
//
// dQ: without `deterministic`, every CTA adds its dS K into one fp32 buffer with atomics. With
// it, CTA x of a (batch, KV head) handles key blocks x, x + gridDim.x, ... in that order and adds
// into buffer x with plain read-add-write (only it touches those rows of buffer x); the convert
// kernel sums the buffers in a fixed order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/common/fast_exp.cuh"
#include "cuda/common/fragment_address.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd/query_stage.cuh"
#include "cuda/flash_bwd/tile_ops.cuh"
#include "cuda/flash_bwd/traits.cuh"
#include "cuda/sm70/backward_arch.cuh"
#include "cuda/sm75/backward_arch.cuh"
#include "cuda/sm80/backward_arch.cuh"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Tail-split epilogue (plan.hpp: choose_tail_split): the piece adds its dK (scaled) and dV
// partials into the tile's fp32 scratch, (2, kBlockN, kHeadDim), then counts itself; the last
// piece of the tile to finish converts the sums to dK and dV. The fences make every piece's
// reductions visible before its count, and the counted partials visible to the last piece (the
// CUDA programming guide's "last block" pattern, threadFenceReduction); it reads them from L2.
template <class T>
__device__ __forceinline__ void finish_tail_piece(const float (&acc_dk)[T::kKVTilesM][T::kKVTilesN][4],
                                                  const float (&acc_dv)[T::kKVTilesM][T::kKVTilesN][4],
                                                  const BackwardParams& p, int64_t tail_tile, int k0, int len_k,
                                                  typename T::Element* dk_base, typename T::Element* dv_base,
                                                  int kv_n0, int kv_d0, int fr, int fc, int tid, int* last_piece) {
  using E = typename T::Element;
  using A = typename T::Arch;
  constexpr int kTileElems = T::kBlockN * T::kHeadDim;
  float* sums = p.dkv_accum + tail_tile * 2 * kTileElems;  // dK rows, then dV rows
#pragma unroll
  for (int mt = 0; mt < T::kKVTilesM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float* row = sums + (kv_n0 + mt * A::kTileRows + fr + A::kHalfRows * r) * T::kHeadDim + kv_d0 + fc;
#pragma unroll
      for (int nt = 0; nt < T::kKVTilesN; ++nt) {
        red_add_pair(row + nt * A::kFragCols, acc_dk[mt][nt][2 * r] * p.scale, acc_dk[mt][nt][2 * r + 1] * p.scale);
        red_add_pair(row + kTileElems + nt * A::kFragCols, acc_dv[mt][nt][2 * r], acc_dv[mt][nt][2 * r + 1]);
      }
    }
  __threadfence();
  __syncthreads();
  if (tid == 0) *last_piece = atomicAdd(p.tail_counters + tail_tile, 1u) == static_cast<unsigned>(p.tail_pieces - 1);
  __syncthreads();
  if (!*last_piece) return;
  __threadfence();
  for (int i = tid * 2; i < 2 * kTileElems; i += T::kThreads * 2) {
    const int which = i / kTileElems, row = i % kTileElems / T::kHeadDim, col = i % T::kHeadDim;
    const int j = k0 + row;
    if (j >= len_k) continue;
    const float2 v = __ldcg(reinterpret_cast<const float2*>(sums + i));
    E* dst = which == 0 ? dk_base + static_cast<int64_t>(j) * p.dk_token_stride
                        : dv_base + static_cast<int64_t>(j) * p.dv_token_stride;
    *reinterpret_cast<uint32_t*>(dst + col) = sm80::pack2<E>(v.x, v.y);
  }
}

// kTileGrid: the kernel of a padded, unmasked, atomic-dQ call (plan.hpp: plan_tile_grid): a 1-D
// grid of whole tiles, then the tail split's pieces; dQ before dK where T::kDqBeforeDk. Its own
// instance so the (key block, KV head, batch) grid keeps reading blockIdx (ptxas spilled twice as
// many bytes with both in one kernel).
template <class T, bool kSoftcap, bool kTileGrid>
__global__ void __launch_bounds__(T::kThreads, 1) flash_backward_kernel(const BackwardParams p) {
  using E = typename T::Element;
  using Arch = typename T::Arch;
  using TileK = typename Arch::template TileCopy<T::kBlockN, T::kHeadDim, T::kThreads, typename T::Layout>;
  using TileQ = typename Arch::template TileCopy<T::kBlockM, T::kHeadDim, T::kThreads, typename T::Layout>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = sm80::smem_address(smem);
  const uint32_t sV = sK + T::kOffV, sQ = sK + T::kOffQ, sdO = sK + T::kOffDO, sP = sK + T::kOffP,
                 sdS = sK + T::kOffS;
  const float* s_lse = reinterpret_cast<const float*>(smem + T::kOffLse);  // [kStages][kBlockM]
  const float* s_d = reinterpret_cast<const float*>(smem + T::kOffD);      // [kStages][kBlockM]

  // ---- tile scheduler ------------------------------------------------------------------------
  // Grid (key block, KV head, batch); deterministic: grid.x splits, each stepping over the key
  // blocks. Tile grid: a 1-D grid of whole tiles, then the pieces of the last tail_tiles tiles.
  int first_block = blockIdx.x, kv_head = blockIdx.y, batch = blockIdx.z, block_step = gridDim.x;
  int piece = -1;  // >= 0: this CTA is piece `piece` of tail tile `tail_tile`
  int64_t tail_tile = 0;
  if constexpr (kTileGrid) {
    int64_t tile = blockIdx.x;
    if (tile >= p.main_tiles) {
      tail_tile = (tile - p.main_tiles) / p.tail_pieces;
      piece = static_cast<int>((tile - p.main_tiles) % p.tail_pieces);
      tile = p.main_tiles + tail_tile;
    }
    first_block = static_cast<int>(tile % p.grid_n_blocks);
    kv_head = static_cast<int>(tile / p.grid_n_blocks % p.num_kv_heads);
    batch = static_cast<int>(tile / p.grid_n_blocks / p.num_kv_heads);
    block_step = p.grid_n_blocks;
  }
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int64_t k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int len_q = varlen ? p.cu_seqlens_q[batch + 1] - static_cast<int>(q_start) : p.seqlen_q;
  const int len_k = varlen ? p.cu_seqlens_k[batch + 1] - static_cast<int>(k_start) : p.seqlen_k;
  const int64_t row_base = varlen ? q_start : static_cast<int64_t>(batch) * p.seqlen_q;  // scratch rows
  const int n_blocks = (len_k + T::kBlockN - 1) / T::kBlockN;
  if (first_block >= n_blocks) return;  // varlen: a shorter sequence (never a tail piece)

  SequenceMask mask;
  mask.left = p.window_left;
  mask.right = p.window_right;
  mask.offset = p.bottom_right ? len_k - len_q : 0;
  mask.seqlen_k = len_k;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // This lane's place in the accumulator fragments (Arch: lane_row, kHalfRows, lane_col).
  const int fr = Arch::lane_row(lane), fc = Arch::lane_col(lane);
  [[maybe_unused]] const int g = lane / 4, t = lane % 4;  // store_tile's m16n8 coordinates
  // Warp tiles of the three GEMM shapes (traits.cuh).
  const int sdp_m0 = (warp % T::kWarpsSdPM) * T::kSdPM, sdp_n0 = (warp / T::kWarpsSdPM) * T::kSdPN;
  const int kv_n0 = (warp % T::kWarpsKVN) * T::kKVN, kv_d0 = (warp / T::kWarpsKVN) * T::kKVD;
  const int dq_m0 = (warp % T::kWarpsDQM) * T::kDQM, dq_d0 = (warp / T::kWarpsDQM) * T::kDQD;
  const int64_t dq_row_elems = static_cast<int64_t>(p.num_heads) * T::kHeadDim;
  float* dq_accum = p.dq_accum + (p.deterministic ? blockIdx.x * p.total_q * dq_row_elems : 0);

  const E* k_base = static_cast<const E*>(p.k) + (varlen ? k_start * p.k_token_stride : batch * p.k_batch_stride) +
                    kv_head * p.k_head_stride;
  const E* v_base = static_cast<const E*>(p.v) + (varlen ? k_start * p.v_token_stride : batch * p.v_batch_stride) +
                    kv_head * p.v_head_stride;

  const FragmentAddress<T::kRowElems, LanePattern::kB> frag_k(sK, lane), frag_v(sV, lane);
  const FragmentAddress<T::kRowElems, LanePattern::kBTrans> frag_k_trans(sK, lane);
  const FragmentAddress<T::kBlockN, LanePattern::kB> frag_p_trans(sP, lane), frag_ds_trans(sdS, lane);
  const FragmentAddress<T::kBlockN, LanePattern::kA> frag_ds(sdS, lane);

  for (int n_block = first_block; n_block < n_blocks; n_block += block_step) {
    const int k0 = n_block * T::kBlockN;
    const int k1 = min(k0 + T::kBlockN, len_k);
    // Query rows that see at least one key of [k0, k1): the inverse of mask.key_begin/key_end.
    int64_t q_begin = 0, q_end = len_q;
    if (mask.right >= 0) q_begin = max(int64_t{0}, k0 - mask.offset - mask.right);
    if (mask.left >= 0) q_end = min(static_cast<int64_t>(len_q), (k1 - 1) - mask.offset + mask.left + 1);
    int m_begin = static_cast<int>(q_begin / T::kBlockM);
    int m_end = q_begin < q_end ? static_cast<int>((q_end + T::kBlockM - 1) / T::kBlockM) : m_begin;
    if (piece >= 0) {  // this piece's share of the query blocks
      const int64_t span = m_end - m_begin;
      const int first = m_begin;
      m_begin = first + static_cast<int>(span * piece / p.tail_pieces);
      m_end = first + static_cast<int>(span * (piece + 1) / p.tail_pieces);
    }

    __syncthreads();  // the previous key block's readers of sK and sV are done
    TileK::copy(sK, k_base + static_cast<int64_t>(k0) * p.k_token_stride, p.k_token_stride, len_k - k0, tid);
    TileK::copy(sV, v_base + static_cast<int64_t>(k0) * p.v_token_stride, p.v_token_stride, len_k - k0, tid);
    Arch::commit();

    float acc_dk[T::kKVTilesM][T::kKVTilesN][4], acc_dv[T::kKVTilesM][T::kKVTilesN][4];
    clear_accumulator(acc_dk);
    clear_accumulator(acc_dv);

    for (int head = kv_head * p.group_size; head < (kv_head + 1) * p.group_size; ++head) {
      const E* q_base = static_cast<const E*>(p.q) +
                        (varlen ? q_start * p.q_token_stride : batch * p.q_batch_stride) + head * p.q_head_stride;
      const E* do_base = static_cast<const E*>(p.dout) +
                         (varlen ? q_start * p.do_token_stride : batch * p.do_batch_stride) + head * p.do_head_stride;
      const float* lse_base = p.lse + (varlen ? q_start * p.lse_token_stride : batch * p.lse_batch_stride) +
                              head * p.lse_head_stride;
      const float* d_base = p.d_sum + head * p.total_q + row_base;

      // Q, dO, lse and D of query block m into stage buffer `stage`.
      auto load_query_block = [&](int m, int stage) {
        const int q0 = m * T::kBlockM;
        TileQ::copy(sQ + stage * T::kSmemQ, q_base + static_cast<int64_t>(q0) * p.q_token_stride, p.q_token_stride,
                    len_q - q0, tid);
        TileQ::copy(sdO + stage * T::kSmemQ, do_base + static_cast<int64_t>(q0) * p.do_token_stride,
                    p.do_token_stride, len_q - q0, tid);
        if (tid < T::kBlockM) {
          const bool valid = q0 + tid < len_q;
          const uint32_t slot = (stage * T::kBlockM + tid) * 4;
          Arch::copy_4(sK + T::kOffLse + slot, valid ? lse_base + (q0 + tid) * p.lse_token_stride : p.lse, valid);
          Arch::copy_4(sK + T::kOffD + slot, valid ? d_base + q0 + tid : p.d_sum, valid);
        }
        Arch::commit();
      };

      // The previous head's last block may still be read (dV, dK) by slower warps.
      __syncthreads();
      if (m_begin < m_end) load_query_block(m_begin, 0);
      for (int m = m_begin; m < m_end; ++m) {
        const int stage = T::kStages == 2 ? (m - m_begin) & 1 : 0;
        Arch::wait_all();
        // K, V (first block) and this query block have landed; every warp is done with the
        // previous block's sP, sdS and the other stage's Q and dO.
        __syncthreads();
        if (T::kStages == 2 && m + 1 < m_end) load_query_block(m + 1, stage ^ 1);

        const int q0 = m * T::kBlockM;
        const bool masked = mask.classify(q0, q0 + T::kBlockM, k0, k0 + T::kBlockN) != TileClass::full;
        const uint32_t sQ_stage = sQ + stage * T::kSmemQ, sdO_stage = sdO + stage * T::kSmemQ;

        // ---- S = Q K^T, then P = exp2(S * scale_log2 - lse * log2 e), kept in registers ---------
        // acc_p, acc_ds: (kSdPTilesM m16 x kSdPTilesN n8) f32, rows sdp_m0.., keys sdp_n0..
        float acc_p[T::kSdPTilesM][T::kSdPTilesN][4];
        if constexpr (Arch::kQuadPairs) {
          sm70::gemm_rows_rows<T::kSdPTilesM, T::kSdPTilesN, T::kHeadDim, typename T::Layout, typename T::Layout>(
              acc_p, sQ_stage, sdp_m0, sK, sdp_n0, lane);
        } else {
          gemm_nt<Arch, E, T::kSdPTilesM, T::kSdPTilesN, T::kHeadDim / 16>(
              acc_p, FragmentAddress<T::kRowElems, LanePattern::kA>(sQ_stage, lane), sdp_m0, frag_k, sdp_n0);
        }
        [[maybe_unused]] __half2 dtanh[kSoftcap ? T::kSdPTilesM : 1][kSoftcap ? T::kSdPTilesN : 1][2];
        const float* lse_slot = s_lse + stage * T::kBlockM;
        logits<T, kSoftcap>(acc_p, dtanh, lse_slot, p, sdp_m0, fr);
        if (masked) mask_logits<T>(acc_p, mask, q0, sdp_m0, k0 + sdp_n0, fr, fc);
#pragma unroll
        for (int mt = 0; mt < T::kSdPTilesM; ++mt)
#pragma unroll
          for (int nt = 0; nt < T::kSdPTilesN; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_p[mt][nt][e] = exp2_ftz(acc_p[mt][nt][e]);

        // ---- dP = dO V^T, then dS = P * (dP - D); P and dS to shared memory ---------------------
        float acc_ds[T::kSdPTilesM][T::kSdPTilesN][4];
        if constexpr (Arch::kQuadPairs) {
          sm70::gemm_rows_rows<T::kSdPTilesM, T::kSdPTilesN, T::kHeadDim, typename T::Layout, typename T::Layout>(
              acc_ds, sdO_stage, sdp_m0, sV, sdp_n0, lane);
        } else {
          gemm_nt<Arch, E, T::kSdPTilesM, T::kSdPTilesN, T::kHeadDim / 16>(
              acc_ds, FragmentAddress<T::kRowElems, LanePattern::kA>(sdO_stage, lane), sdp_m0, frag_v, sdp_n0);
        }
#pragma unroll
        for (int mt = 0; mt < T::kSdPTilesM; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float d_row = s_d[stage * T::kBlockM + sdp_m0 + mt * Arch::kTileRows + fr + Arch::kHalfRows * r];
#pragma unroll
            for (int nt = 0; nt < T::kSdPTilesN; ++nt)
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                float ds = acc_p[mt][nt][2 * r + c] * (acc_ds[mt][nt][2 * r + c] - d_row);
                if constexpr (kSoftcap) ds *= c == 0 ? __low2float(dtanh[mt][nt][r]) : __high2float(dtanh[mt][nt][r]);
                acc_ds[mt][nt][2 * r + c] = ds;
              }
          }
        if constexpr (Arch::kQuadPairs) {
          store_tile_pairs<T>(sP, acc_p, sdp_m0, sdp_n0, fr, fc);
          store_tile_pairs<T>(sdS, acc_ds, sdp_m0, sdp_n0, fr, fc);
        } else {
          store_tile<E, typename T::LayoutP>(sP, acc_p, sdp_m0, sdp_n0, g, t);
          store_tile<E, typename T::LayoutP>(sdS, acc_ds, sdp_m0, sdp_n0, g, t);
        }
        __syncthreads();  // sP and sdS are complete
        // Paths without cp.async: the next query block into registers now, while the dV and dK
        // GEMMs run; into the only stage after the barrier below (query_stage.cuh).
        [[maybe_unused]] QueryStage<T> next_query;
        if constexpr (QueryStage<T>::kEnabled) {
          if (m + 1 < m_end) {
            const int q0_next = q0 + T::kBlockM;
            next_query.issue(q_base + static_cast<int64_t>(q0_next) * p.q_token_stride, p.q_token_stride,
                             do_base + static_cast<int64_t>(q0_next) * p.do_token_stride, p.do_token_stride,
                             lse_base + static_cast<int64_t>(q0_next) * p.lse_token_stride, p.lse_token_stride,
                             d_base + q0_next, len_q - q0_next, tid);
          }
        }

        // ---- dV += P^T dO, dK += dS^T Q (kKVN keys x kKVD columns per warp) ---------------------
        if constexpr (Arch::kQuadPairs) {
          sm70::gemm_acc<T::kKVTilesM, T::kKVTilesN, T::kBlockM, true, typename T::LayoutP, typename T::Layout>(
              acc_dv, sP, kv_n0, sdO_stage, kv_d0, lane);
        } else {
          gemm_nn<Arch, E, T::kKVTilesM, T::kKVTilesN, T::kBlockM / 16, true>(
              acc_dv, frag_p_trans, kv_n0, FragmentAddress<T::kRowElems, LanePattern::kBTrans>(sdO_stage, lane),
              kv_d0 / 8);
        }
        // ---- dQ (kDQM query rows x kDQD columns per warp) += dS K ---------------------------------
        // Before dK in the tile-grid kernel where T::kDqBeforeDk (the reductions' latency overlaps
        // the dK GEMM), else after it (below). The same lines twice, not one helper or lambda:
        // with those ptxas scheduled the other kernels differently (d128 causal -1.7% on the H200).
        constexpr bool kDqFirst = kTileGrid && T::kDqBeforeDk;
        if constexpr (kDqFirst) {
          float acc_dq[T::kDQTilesM][T::kDQTilesN][4];
          clear_accumulator(acc_dq);
          if constexpr (Arch::kQuadPairs) {
            sm70::gemm_acc<T::kDQTilesM, T::kDQTilesN, T::kBlockN, false, typename T::LayoutP, typename T::Layout>(
                acc_dq, sdS, dq_m0, sK, dq_d0, lane);
          } else {
            gemm_nn<Arch, E, T::kDQTilesM, T::kDQTilesN, T::kBlockN / 16, false>(acc_dq, frag_ds, dq_m0, frag_k_trans,
                                                                             dq_d0 / 8);
          }
#pragma unroll
          for (int mt = 0; mt < T::kDQTilesM; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int i = q0 + dq_m0 + mt * Arch::kTileRows + fr + Arch::kHalfRows * r;
              if (i >= len_q) continue;
              float* dst = dq_accum + (row_base + i) * dq_row_elems + head * T::kHeadDim + dq_d0 + fc;
#pragma unroll
              for (int nt = 0; nt < T::kDQTilesN; ++nt)
                add_pair(dst + nt * Arch::kFragCols, acc_dq[mt][nt][2 * r], acc_dq[mt][nt][2 * r + 1], !p.deterministic);
            }
        }
        if constexpr (Arch::kQuadPairs) {
          sm70::gemm_acc<T::kKVTilesM, T::kKVTilesN, T::kBlockM, true, typename T::LayoutP, typename T::Layout>(
              acc_dk, sdS, kv_n0, sQ_stage, kv_d0, lane);
        } else {
          gemm_nn<Arch, E, T::kKVTilesM, T::kKVTilesN, T::kBlockM / 16, true>(
              acc_dk, frag_ds_trans, kv_n0, FragmentAddress<T::kRowElems, LanePattern::kBTrans>(sQ_stage, lane),
              kv_d0 / 8);
        }
        if (T::kStages == 1 && m + 1 < m_end) {
          __syncthreads();  // every warp is done with the only stage's Q and dO
          if constexpr (QueryStage<T>::kEnabled) {
            next_query.land(sQ, sdO, sK + T::kOffLse, sK + T::kOffD, tid);
          } else {
            load_query_block(m + 1, 0);
          }
        }

        if constexpr (!kDqFirst) {  // dQ after dK: the same lines as above
          float acc_dq[T::kDQTilesM][T::kDQTilesN][4];
          clear_accumulator(acc_dq);
          if constexpr (Arch::kQuadPairs) {
            sm70::gemm_acc<T::kDQTilesM, T::kDQTilesN, T::kBlockN, false, typename T::LayoutP, typename T::Layout>(
                acc_dq, sdS, dq_m0, sK, dq_d0, lane);
          } else {
            gemm_nn<Arch, E, T::kDQTilesM, T::kDQTilesN, T::kBlockN / 16, false>(acc_dq, frag_ds, dq_m0, frag_k_trans,
                                                                             dq_d0 / 8);
          }
#pragma unroll
          for (int mt = 0; mt < T::kDQTilesM; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int i = q0 + dq_m0 + mt * Arch::kTileRows + fr + Arch::kHalfRows * r;
              if (i >= len_q) continue;
              float* dst = dq_accum + (row_base + i) * dq_row_elems + head * T::kHeadDim + dq_d0 + fc;
#pragma unroll
              for (int nt = 0; nt < T::kDQTilesN; ++nt)
                add_pair(dst + nt * Arch::kFragCols, acc_dq[mt][nt][2 * r], acc_dq[mt][nt][2 * r + 1], !p.deterministic);
            }
        }
        // No barrier here: the next block rewrites sP and sdS, and loads into this stage's
        // buffers, only after its top barrier, which every warp reaches only once it is done.
      }
    }
    Arch::wait_all();  // K and V, when no query block saw this key block

    // ---- epilogue: dK = scale * acc_dk, dV = acc_dv, rows inside the sequence ----------------
    E* dk_base = static_cast<E*>(p.dk) + (varlen ? k_start * p.dk_token_stride : batch * p.dk_batch_stride) +
                 kv_head * p.dk_head_stride;
    E* dv_base = static_cast<E*>(p.dv) + (varlen ? k_start * p.dv_token_stride : batch * p.dv_batch_stride) +
                 kv_head * p.dv_head_stride;
    if (piece >= 0) {
      // The lse slots hold the last-piece flag: every warp is past the loop at its first barrier.
      finish_tail_piece<T>(acc_dk, acc_dv, p, tail_tile, k0, len_k, dk_base, dv_base, kv_n0, kv_d0, fr, fc, tid,
                           reinterpret_cast<int*>(smem + T::kOffLse));
      continue;
    }
#pragma unroll
    for (int mt = 0; mt < T::kKVTilesM; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = k0 + kv_n0 + mt * Arch::kTileRows + fr + Arch::kHalfRows * r;
        if (j >= len_k) continue;
        E* dk_row = dk_base + static_cast<int64_t>(j) * p.dk_token_stride + kv_d0 + fc;
        E* dv_row = dv_base + static_cast<int64_t>(j) * p.dv_token_stride + kv_d0 + fc;
#pragma unroll
        for (int nt = 0; nt < T::kKVTilesN; ++nt) {
          *reinterpret_cast<uint32_t*>(dk_row + nt * Arch::kFragCols) =
              sm80::pack2<E>(acc_dk[mt][nt][2 * r] * p.scale, acc_dk[mt][nt][2 * r + 1] * p.scale);
          *reinterpret_cast<uint32_t*>(dv_row + nt * Arch::kFragCols) =
              sm80::pack2<E>(acc_dv[mt][nt][2 * r], acc_dv[mt][nt][2 * r + 1]);
        }
      }
  }
}

}  // namespace fastattn::cuda
