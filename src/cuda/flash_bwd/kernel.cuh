// kernel.cuh — the FlashAttention-2 backward kernel: one CTA per (key block, KV head, batch),
// parallel over key blocks (Dao 2023, Algorithm 2; flash-attn 2's sm80 backward).
//
// Roles, in order: scheduler (which key block and which query blocks see it), global->shared
// copy, main loop over the query blocks of every query head sharing the KV head (recompute
// S^T = K Q^T and P^T from lse; dP^T = V dO^T; dS^T = P^T * (dP^T - D); dV += P^T dO;
// dK += dS^T Q; dQ += dS K into fp32), epilogue (dK, dV). The MMA atom (sm80/mma.cuh), the
// copy (sm80/tile_copy.cuh) and the shared-memory layout (common/) are the per-arch parts.
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
#include "cuda/flash_bwd/params.hpp"
#include "cuda/flash_bwd/traits.cuh"
#include "cuda/sm80/copy.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm80/tile_copy.cuh"

namespace fastattn::cuda {

// Adds two adjacent fp32 values to global memory.
__device__ __forceinline__ void add_pair(float* dst, float a, float b, bool atomic) {
  if (!atomic) {
    float2 old = *reinterpret_cast<float2*>(dst);
    *reinterpret_cast<float2*>(dst) = make_float2(old.x + a, old.y + b);
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// acc (kNTiles n8 tiles, 16 rows) += A (16 x 16 k-steps from registers or smem) * B, with B read
// by ldmatrix.x4.trans from a (k rows, n chunks) swizzled tile: dV += P^T dO, dK += dS^T Q.
template <class T, int kNTiles, int kKSteps>
__device__ __forceinline__ void gemm_a_regs_b_trans(float (&acc)[kNTiles][4], const uint32_t (&a)[kKSteps][4],
                                                    const FragmentAddress<T::kRowElems, LanePattern::kBTrans>& b,
                                                    int chunk0) {
  using E = typename T::Element;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk)
#pragma unroll
    for (int dp = 0; dp < kNTiles / 2; ++dp) {
      uint32_t frag[4];
      sm80::ldmatrix_x4_trans(frag, b.at(kk * 16, chunk0 + dp * 2));
      const uint32_t lo[2] = {frag[0], frag[1]}, hi[2] = {frag[2], frag[3]};
      sm80::mma_16816<E>(acc[2 * dp], a[kk], lo);
      sm80::mma_16816<E>(acc[2 * dp + 1], a[kk], hi);
    }
}

// acc (16 rows x kNTilesS n8 tiles) = A (16 rows of a (rows, head_dim) tile) * B^T, B the
// (kBlockM, head_dim) tile: S^T = K Q^T and dP^T = V dO^T.
template <class T>
__device__ __forceinline__ void gemm_rows_by_tile(float (&acc)[T::kNTilesS][4],
                                                  const FragmentAddress<T::kRowElems, LanePattern::kA>& a,
                                                  int a_row0,
                                                  const FragmentAddress<T::kRowElems, LanePattern::kB>& b) {
  using E = typename T::Element;
#pragma unroll
  for (int nt = 0; nt < T::kNTilesS; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < T::kKStepsD; ++kk) {
    uint32_t fa[4];
    sm80::ldmatrix_x4(fa, a.at(a_row0, kk * 2));
#pragma unroll
    for (int np = 0; np < T::kNTilesS / 2; ++np) {
      uint32_t fb[4];
      sm80::ldmatrix_x4(fb, b.at(np * 16, kk * 2));
      const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
      sm80::mma_16816<E>(acc[2 * np], fa, lo);
      sm80::mma_16816<E>(acc[2 * np + 1], fa, hi);
    }
  }
}

// Two C tiles side by side are one A k16-tile once packed (mma.cuh).
template <class T, int kKSteps>
__device__ __forceinline__ void pack_a(uint32_t (&a)[kKSteps][4], const float (&c)[2 * kKSteps][4]) {
  using E = typename T::Element;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    a[kk][0] = sm80::pack2<E>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = sm80::pack2<E>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = sm80::pack2<E>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = sm80::pack2<E>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

// P^T = exp2(S^T * scale_log2 - lse * log2 e) in place (acc: 16 keys x kBlockM queries), with
// the soft-cap's derivative 1 - tanh^2 kept for dS. kMasked (partial tiles only): key row r of
// this thread sees queries [q_lo[r], q_hi[r]]. Rows with lse = -inf saw no key: P = 0.
template <class T, bool kSoftcap, bool kMasked>
__device__ __forceinline__ void probabilities(float (&acc)[T::kNTilesS][4], float (&dtanh)[kSoftcap ? T::kNTilesS : 1][4],
                                              const float* lse_slot, const BackwardParams& p, int q0,
                                              const int (&q_lo)[2], const int (&q_hi)[2], int t) {
#pragma unroll
  for (int nt = 0; nt < T::kNTilesS; ++nt) {
    const int col = nt * 8 + 2 * t;
    const float2 l = *reinterpret_cast<const float2*>(lse_slot + col);
    const float lse2[2] = {l.x == -INFINITY ? INFINITY : l.x * 1.4426950408889634f,
                           l.y == -INFINITY ? INFINITY : l.y * 1.4426950408889634f};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float s = acc[nt][e];
      if constexpr (kSoftcap) {
        const float th = tanhf(s * p.softcap_pre_scale);
        dtanh[nt][e] = 1.0f - th * th;
        s = p.softcap * th;
      }
      float prob = exp2_ftz(fmaf(s, p.scale_log2, -lse2[e & 1]));
      if constexpr (kMasked) {
        const int i = q0 + col + (e & 1), r = e / 2;
        if (i < q_lo[r] || i > q_hi[r]) prob = 0.0f;
      }
      acc[nt][e] = prob;
    }
  }
}

template <class T, bool kSoftcap>
__global__ void __launch_bounds__(T::kThreads, 1) flash_backward_kernel(const BackwardParams p) {
  using E = typename T::Element;
  using TileK = sm80::TileCopy<T::kBlockN, T::kHeadDim, T::kThreads, typename T::Layout>;
  using TileQ = sm80::TileCopy<T::kBlockM, T::kHeadDim, T::kThreads, typename T::Layout>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sK = sm80::smem_address(smem);
  const uint32_t sV = sK + T::kOffV, sQ = sK + T::kOffQ, sdO = sK + T::kOffDO, sdS = sK + T::kOffS;
  const float* s_lse = reinterpret_cast<const float*>(smem + T::kOffLse);  // [kStages][kBlockM]
  const float* s_d = reinterpret_cast<const float*>(smem + T::kOffD);      // [kStages][kBlockM]

  // ---- tile scheduler ------------------------------------------------------------------------
  const int kv_head = blockIdx.y, batch = blockIdx.z;
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int64_t q_start = varlen ? p.cu_seqlens_q[batch] : 0;
  const int64_t k_start = varlen ? p.cu_seqlens_k[batch] : 0;
  const int len_q = varlen ? p.cu_seqlens_q[batch + 1] - static_cast<int>(q_start) : p.seqlen_q;
  const int len_k = varlen ? p.cu_seqlens_k[batch + 1] - static_cast<int>(k_start) : p.seqlen_k;
  const int64_t row_base = varlen ? q_start : static_cast<int64_t>(batch) * p.seqlen_q;  // scratch rows
  const int n_blocks = (len_k + T::kBlockN - 1) / T::kBlockN;
  if (static_cast<int>(blockIdx.x) >= n_blocks) return;

  SequenceMask mask;
  mask.left = p.window_left;
  mask.right = p.window_right;
  mask.offset = p.bottom_right ? len_k - len_q : 0;
  mask.seqlen_k = len_k;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int warp_n = warp % T::kWarpsN, warp_d = warp / T::kWarpsN;    // dK/dV, S^T ownership
  const int warp_qm = warp % T::kWarpsQM, warp_qd = warp / T::kWarpsQM;  // dQ ownership
  const int g = lane / 4, t = lane % 4;
  const int64_t dq_row_elems = static_cast<int64_t>(p.num_heads) * T::kHeadDim;
  float* dq_accum = p.dq_accum + (p.deterministic ? blockIdx.x * p.total_q * dq_row_elems : 0);

  const E* k_base = static_cast<const E*>(p.k) + (varlen ? k_start * p.k_token_stride : batch * p.k_batch_stride) +
                    kv_head * p.k_head_stride;
  const E* v_base = static_cast<const E*>(p.v) + (varlen ? k_start * p.v_token_stride : batch * p.v_batch_stride) +
                    kv_head * p.v_head_stride;

  const FragmentAddress<T::kRowElems, LanePattern::kA> frag_k(sK, lane), frag_v(sV, lane);
  const FragmentAddress<T::kRowElems, LanePattern::kBTrans> frag_k_trans(sK, lane);
  const FragmentAddress<T::kBlockM, LanePattern::kB> frag_ds(sdS, lane);

  for (int n_block = blockIdx.x; n_block < n_blocks; n_block += gridDim.x) {
    const int k0 = n_block * T::kBlockN;
    const int k1 = min(k0 + T::kBlockN, len_k);
    // Query rows that see at least one key of [k0, k1): the inverse of mask.key_begin/key_end.
    int64_t q_begin = 0, q_end = len_q;
    if (mask.right >= 0) q_begin = max(int64_t{0}, k0 - mask.offset - mask.right);
    if (mask.left >= 0) q_end = min(static_cast<int64_t>(len_q), (k1 - 1) - mask.offset + mask.left + 1);
    const int m_begin = static_cast<int>(q_begin / T::kBlockM);
    const int m_end = q_begin < q_end ? static_cast<int>((q_end + T::kBlockM - 1) / T::kBlockM) : m_begin;

    __syncthreads();  // the previous key block's readers of sK and sV are done
    TileK::copy(sK, k_base + static_cast<int64_t>(k0) * p.k_token_stride, p.k_token_stride, len_k - k0, tid);
    TileK::copy(sV, v_base + static_cast<int64_t>(k0) * p.v_token_stride, p.v_token_stride, len_k - k0, tid);
    sm80::cp_async_commit();

    // The key rows of this thread's S^T fragments, and the query rows each one sees (for
    // partial tiles): key j is visible to query i iff q_lo[r] <= i <= q_hi[r].
    int q_lo[2], q_hi[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = k0 + warp_n * 16 + g + 8 * r;
      const int64_t lo = mask.right >= 0 ? j - mask.offset - mask.right : 0;
      const int64_t hi = j >= len_k ? -1 : mask.left >= 0 ? j - mask.offset + mask.left : (int64_t{1} << 31) - 1;
      q_lo[r] = static_cast<int>(max(int64_t{-1}, min(lo, (int64_t{1} << 31) - 1)));
      q_hi[r] = static_cast<int>(max(int64_t{-1}, min(hi, (int64_t{1} << 31) - 1)));
    }

    float acc_dk[T::kNTilesKV][4], acc_dv[T::kNTilesKV][4];
#pragma unroll
    for (int nt = 0; nt < T::kNTilesKV; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_dk[nt][e] = acc_dv[nt][e] = 0.0f;

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
          sm80::cp_async_4(sK + T::kOffLse + slot, valid ? lse_base + (q0 + tid) * p.lse_token_stride : p.lse, valid);
          sm80::cp_async_4(sK + T::kOffD + slot, valid ? d_base + q0 + tid : p.d_sum, valid);
        }
        sm80::cp_async_commit();
      };

      if (m_begin < m_end) load_query_block(m_begin, 0);
      for (int m = m_begin; m < m_end; ++m) {
        const int stage = T::kStages == 2 ? (m - m_begin) & 1 : 0;
        if (T::kStages == 2 && m + 1 < m_end) {
          load_query_block(m + 1, stage ^ 1);
          sm80::cp_async_wait<1>();
        } else {
          sm80::cp_async_wait<0>();
        }
        __syncthreads();  // K, V (first block) and this query block have landed

        const int q0 = m * T::kBlockM;
        const bool masked = mask.classify(q0, q0 + T::kBlockM, k0, k0 + T::kBlockN) != TileClass::full;
        const uint32_t sQ_stage = sQ + stage * T::kSmemQ, sdO_stage = sdO + stage * T::kSmemQ;

        // ---- S^T = K Q^T, then P^T = exp2(S^T * scale_log2 - lse * log2 e) ------------------
        float acc_p[T::kNTilesS][4];
        gemm_rows_by_tile<T>(acc_p, frag_k, warp_n * 16, FragmentAddress<T::kRowElems, LanePattern::kB>(sQ_stage, lane));
        [[maybe_unused]] float dtanh[kSoftcap ? T::kNTilesS : 1][4];
        const float* lse_slot = s_lse + stage * T::kBlockM;
        if (masked) {
          probabilities<T, kSoftcap, true>(acc_p, dtanh, lse_slot, p, q0, q_lo, q_hi, t);
        } else {
          probabilities<T, kSoftcap, false>(acc_p, dtanh, lse_slot, p, q0, q_lo, q_hi, t);
        }

        // ---- dP^T = V dO^T, then dS^T = P^T * (dP^T - D) ------------------------------------
        float acc_ds[T::kNTilesS][4];
        gemm_rows_by_tile<T>(acc_ds, frag_v, warp_n * 16, FragmentAddress<T::kRowElems, LanePattern::kB>(sdO_stage, lane));
#pragma unroll
        for (int nt = 0; nt < T::kNTilesS; ++nt) {
          const int col = nt * 8 + 2 * t;
          const float2 dd = *reinterpret_cast<const float2*>(s_d + stage * T::kBlockM + col);
          const float d0 = dd.x, d1 = dd.y;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float ds = acc_p[nt][e] * (acc_ds[nt][e] - ((e & 1) ? d1 : d0));
            if constexpr (kSoftcap) ds *= dtanh[nt][e];
            acc_ds[nt][e] = ds;
          }
        }
        uint32_t a_p[T::kKStepsM][4], a_ds[T::kKStepsM][4];
        pack_a<T, T::kKStepsM>(a_p, acc_p);
        pack_a<T, T::kKStepsM>(a_ds, acc_ds);

        // sdS: (kBlockN keys, kBlockM queries) = dS^T, for dQ = dS K. Rows g and g + 8 of a
        // 16-row tile hold different chunk positions after the swizzle: no bank conflicts.
        if (warp_d == 0) {
#pragma unroll
          for (int kk = 0; kk < T::kKStepsM; ++kk)
#pragma unroll
            for (int half = 0; half < 2; ++half)
#pragma unroll
              for (int r = 0; r < 2; ++r) {
                const int row = warp_n * 16 + g + 8 * r;
                const uint32_t addr = sdS + T::LayoutS::offset(row, 2 * kk + half) + t * 4;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(a_ds[kk][2 * half + r]));
              }
        }

        // ---- dV += P^T dO, dK += dS^T Q --------------------------------------------------------
        const int chunk_kv = warp_d * T::kWarpDims / 8;
        gemm_a_regs_b_trans<T, T::kNTilesKV, T::kKStepsM>(
            acc_dv, a_p, FragmentAddress<T::kRowElems, LanePattern::kBTrans>(sdO_stage, lane), chunk_kv);
        gemm_a_regs_b_trans<T, T::kNTilesKV, T::kKStepsM>(
            acc_dk, a_ds, FragmentAddress<T::kRowElems, LanePattern::kBTrans>(sQ_stage, lane), chunk_kv);
        __syncthreads();  // sdS is complete; every warp is done with this stage's Q and dO
        if (T::kStages == 1 && m + 1 < m_end) load_query_block(m + 1, 0);

        // ---- dQ (kQMTiles x 16 query rows x kQDims per warp) += dS K ---------------------------
        float acc_dq[T::kQMTiles][T::kNTilesQ][4];
#pragma unroll
        for (int mt = 0; mt < T::kQMTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < T::kNTilesQ; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_dq[mt][nt][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < T::kKStepsN; ++kk) {
          uint32_t fa[T::kQMTiles][4];  // A = dS (queries x keys) = sdS^T: the kB pattern, transposed
#pragma unroll
          for (int mt = 0; mt < T::kQMTiles; ++mt)
            sm80::ldmatrix_x4_trans(fa[mt], frag_ds.at(kk * 16, (warp_qm * T::kQMTiles + mt) * 2));
#pragma unroll
          for (int dp = 0; dp < T::kNTilesQ / 2; ++dp) {
            uint32_t fb[4];
            sm80::ldmatrix_x4_trans(fb, frag_k_trans.at(kk * 16, warp_qd * T::kQDims / 8 + dp * 2));
            const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
#pragma unroll
            for (int mt = 0; mt < T::kQMTiles; ++mt) {
              sm80::mma_16816<E>(acc_dq[mt][2 * dp], fa[mt], lo);
              sm80::mma_16816<E>(acc_dq[mt][2 * dp + 1], fa[mt], hi);
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < T::kQMTiles; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int i = q0 + (warp_qm * T::kQMTiles + mt) * 16 + g + 8 * r;
            if (i >= len_q) continue;
            float* dst = dq_accum + (row_base + i) * dq_row_elems + head * T::kHeadDim + warp_qd * T::kQDims + 2 * t;
#pragma unroll
            for (int nt = 0; nt < T::kNTilesQ; ++nt)
              add_pair(dst + nt * 8, acc_dq[mt][nt][2 * r], acc_dq[mt][nt][2 * r + 1], !p.deterministic);
          }
        // No barrier here: the next block rewrites sdS only after its top barrier, which every
        // warp reaches only once its dQ above is done; and the next load into this stage's
        // buffers is issued only after this block's middle barrier.
      }
    }
    sm80::cp_async_wait<0>();  // K and V, when no query block saw this key block

    // ---- epilogue: dK = scale * acc_dk, dV = acc_dv, rows inside the sequence ----------------
    E* dk_base = static_cast<E*>(p.dk) + (varlen ? k_start * p.dk_token_stride : batch * p.dk_batch_stride) +
                 kv_head * p.dk_head_stride;
    E* dv_base = static_cast<E*>(p.dv) + (varlen ? k_start * p.dv_token_stride : batch * p.dv_batch_stride) +
                 kv_head * p.dv_head_stride;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = k0 + warp_n * 16 + g + 8 * r;
      if (j >= len_k) continue;
      E* dk_row = dk_base + static_cast<int64_t>(j) * p.dk_token_stride + warp_d * T::kWarpDims + 2 * t;
      E* dv_row = dv_base + static_cast<int64_t>(j) * p.dv_token_stride + warp_d * T::kWarpDims + 2 * t;
#pragma unroll
      for (int nt = 0; nt < T::kNTilesKV; ++nt) {
        *reinterpret_cast<uint32_t*>(dk_row + nt * 8) =
            sm80::pack2<E>(acc_dk[nt][2 * r] * p.scale, acc_dk[nt][2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_row + nt * 8) = sm80::pack2<E>(acc_dv[nt][2 * r], acc_dv[nt][2 * r + 1]);
      }
    }
  }
}

}  // namespace fastattn::cuda
