// tile_ops.cuh — the backward kernel's per-tile operations (flash_bwd/kernel.cuh): the fp32 dQ
// reductions, the ldmatrix GEMMs of the m16n8 paths (sm80, sm75: gemm_nt for S and dP, gemm_nn
// for dV, dK and dQ; the sm70 GEMMs are in sm70/backward_arch.cuh), the P / dS stores to shared
// memory, and P's logits and mask.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/common/fast_exp.cuh"
#include "cuda/common/fragment_address.cuh"
#include "cuda/common/fragments.cuh"
#include "cuda/flash_bwd/params.hpp"
#include "cuda/sm80/mma.cuh"

namespace fastattn::cuda {

// Adds two adjacent fp32 values to global memory with one reduction (sm90: red.v2; sm80: two
// atomics).
__device__ __forceinline__ void red_add_pair(float* dst, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a);
  atomicAdd(dst + 1, b);
#endif
}

// Adds two adjacent fp32 values to global memory: atomically, or with a plain read-add-write
// (deterministic mode, where only this CTA touches the row).
__device__ __forceinline__ void add_pair(float* dst, float a, float b, bool atomic) {
  if (!atomic) {
    float2 old = *reinterpret_cast<float2*>(dst);
    *reinterpret_cast<float2*>(dst) = make_float2(old.x + a, old.y + b);
    return;
  }
  red_add_pair(dst, a, b);
}

// acc (kTilesM m16 x kTilesN n8) = A B^T over k = kKSteps x 16, where A is the (rows,
// k chunks) tile at a_row0 and B the (rows, k chunks) tile at b_row0 — both row-major in k:
// S = Q K^T and dP = dO V^T.
template <class Arch, class E, int kTilesM, int kTilesN, int kKSteps, int kRowElemsA, int kRowElemsB>
__device__ __forceinline__ void gemm_nt(float (&acc)[kTilesM][kTilesN][4],
                                        const FragmentAddress<kRowElemsA, LanePattern::kA>& a, int a_row0,
                                        const FragmentAddress<kRowElemsB, LanePattern::kB>& b, int b_row0) {
  clear_accumulator(acc);
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t fa[kTilesM][4];
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) sm80::ldmatrix_x4(fa[mt], a.at(a_row0 + mt * 16, kk * 2));
#pragma unroll
    for (int np = 0; np < kTilesN / 2; ++np) {
      uint32_t fb[4];
      sm80::ldmatrix_x4(fb, b.at(b_row0 + np * 16, kk * 2));
      const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt) {
        Arch::template mma<E>(acc[mt][2 * np], fa[mt], lo);
        Arch::template mma<E>(acc[mt][2 * np + 1], fa[mt], hi);
      }
    }
  }
}

// acc (kTilesM m16 x kTilesN n8) += A B over k = kKSteps x 16, with B read by ldmatrix.trans
// from a (k rows, n chunks) tile. kATransposed: A is the transpose of a (k rows, m chunks)
// tile (dV += P^T dO, dK += dS^T Q, A from sP / sdS); else A is a (m rows, k chunks) tile
// (dQ = dS K, A from sdS).
template <class Arch, class E, int kTilesM, int kTilesN, int kKSteps, bool kATransposed, class FragA, class FragB>
__device__ __forceinline__ void gemm_nn(float (&acc)[kTilesM][kTilesN][4], const FragA& a, int a_m0,
                                        const FragB& b, int b_chunk0) {
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    uint32_t fa[kTilesM][4];
#pragma unroll
    for (int mt = 0; mt < kTilesM; ++mt) {
      if constexpr (kATransposed) {
        sm80::ldmatrix_x4_trans(fa[mt], a.at(kk * 16, (a_m0 + mt * 16) / 8));
      } else {
        sm80::ldmatrix_x4(fa[mt], a.at(a_m0 + mt * 16, kk * 2));
      }
    }
#pragma unroll
    for (int np = 0; np < kTilesN / 2; ++np) {
      uint32_t fb[4];
      sm80::ldmatrix_x4_trans(fb, b.at(kk * 16, b_chunk0 + np * 2));
      const uint32_t lo[2] = {fb[0], fb[1]}, hi[2] = {fb[2], fb[3]};
#pragma unroll
      for (int mt = 0; mt < kTilesM; ++mt) {
        Arch::template mma<E>(acc[mt][2 * np], fa[mt], lo);
        Arch::template mma<E>(acc[mt][2 * np + 1], fa[mt], hi);
      }
    }
  }
}

// Stores a warp's (kTilesM m16 x kTilesN n8) f32 tile at (row0, col0) of a swizzled
// (rows, kRowElems) 16-bit tile, rounded to 16 bits.
// sm90: one stmatrix.x4 per m16 x n16 — 4x fewer store instructions than 4-byte stores (the
// backward ran 3.5% faster at d = 128, 2% at d = 64, A/B in one job on the H200). Matrix
// q = lane / 8 is (rows (q & 1) * 8.., columns (q >> 1) * 8..), so the lanes' row addresses
// follow the kBTrans lane pattern (fragment_address.cuh).
// sm80: 4-byte stores; the 8 rows g of one store land in 8 different chunk positions (the
// swizzle), so a store touches 32 distinct banks.
template <class E, class Layout, int kTilesM, int kTilesN>
__device__ __forceinline__ void store_tile(uint32_t smem_tile, const float (&acc)[kTilesM][kTilesN][4], int row0,
                                           int col0, int g, int t) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const FragmentAddress<Layout::kChunks * 8, LanePattern::kBTrans> frag(smem_tile, g * 4 + t);
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
    for (int np = 0; np < kTilesN / 2; ++np) {
      const float(&lo)[4] = acc[mt][2 * np];
      const float(&hi)[4] = acc[mt][2 * np + 1];
      sm80::stmatrix_x4(frag.at(row0 + mt * 16, col0 / 8 + np * 2), sm80::pack2<E>(lo[0], lo[1]),
                        sm80::pack2<E>(lo[2], lo[3]), sm80::pack2<E>(hi[0], hi[1]), sm80::pack2<E>(hi[2], hi[3]));
    }
#else
#pragma unroll
  for (int mt = 0; mt < kTilesM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kTilesN; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + mt * 16 + g + 8 * r;
        const uint32_t addr = smem_tile + Layout::offset(row, (col0 + nt * 8) / 8) + t * 4;
        const uint32_t v = sm80::pack2<E>(acc[mt][nt][2 * r], acc[mt][nt][2 * r + 1]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
      }
#endif
}

// The quad-pair paths' P / dS store (sm70): each thread's row pairs of a warp's (kSdPTilesM x
// kSdPTilesN fragment) f32 tile at (row0, col0), rounded to 16 bits, 4 bytes per store.
template <class T>
__device__ __forceinline__ void store_tile_pairs(uint32_t smem_tile, const float (&acc)[T::kSdPTilesM][T::kSdPTilesN][4],
                                                 int row0, int col0, int fr, int fc) {
  using A = typename T::Arch;
  using Layout = typename T::LayoutP;
#pragma unroll
  for (int mt = 0; mt < T::kSdPTilesM; ++mt)
#pragma unroll
    for (int nt = 0; nt < T::kSdPTilesN; ++nt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + mt * A::kTileRows + fr + A::kHalfRows * r;
        const int col = col0 + nt * A::kFragCols + fc;
        const uint32_t addr = smem_tile + Layout::offset(row, col / 8) + (col % 8) * 2;
        const uint32_t v = sm80::pack2<typename T::Element>(acc[mt][nt][2 * r], acc[mt][nt][2 * r + 1]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
      }
}

// P = exp2(S * scale_log2 - lse * log2 e) in three steps (acc: the warp's S tile, query rows
// row0 + mt * 16 + g + 8r of the block, keys key0 + nt * 8 + 2t + e): logits() (soft-cap
// applied, its derivative 1 - tanh^2 kept for dS as f16 pairs: it only scales dS, which is
// rounded to 16 bits before its MMAs; f32 would cost 32 more registers and spill), then on
// partial tiles mask_logits() (-inf outside each row's window [lo, hi]), then exp2 in place.
// Rows with lse = -inf saw no key: P = 0. Split this way, the exponentials and the dP GEMM
// that follows share one basic block with no shared-memory store between them (P is stored
// after dP), so ptxas overlaps the MUFU work with the MMAs: backward +4.6-5.2% on the H200
// (A/B in one job) over computing and storing P before the dP GEMM, in one branch per mask
// case.
template <class T, bool kSoftcap>
__device__ __forceinline__ void logits(float (&acc)[T::kSdPTilesM][T::kSdPTilesN][4],
                                       __half2 (&dtanh)[kSoftcap ? T::kSdPTilesM : 1][kSoftcap ? T::kSdPTilesN : 1][2],
                                       const float* lse_slot, const BackwardParams& p, int row0, int fr) {
  using A = typename T::Arch;
#pragma unroll
  for (int mt = 0; mt < T::kSdPTilesM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = lse_slot[row0 + mt * A::kTileRows + fr + A::kHalfRows * r];
      const float lse2 = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
#pragma unroll
      for (int nt = 0; nt < T::kSdPTilesN; ++nt) {
        [[maybe_unused]] float dt[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          float s = acc[mt][nt][2 * r + c];
          if constexpr (kSoftcap) {
            const float th = tanhf(s * p.softcap_pre_scale);
            dt[c] = 1.0f - th * th;
            s = p.softcap * th;
          }
          acc[mt][nt][2 * r + c] = fmaf(s, p.scale_log2, -lse2);
        }
        if constexpr (kSoftcap) dtanh[mt][nt][r] = __floats2half2_rn(dt[0], dt[1]);
      }
    }
}

template <class T>
__device__ __forceinline__ void mask_logits(float (&acc)[T::kSdPTilesM][T::kSdPTilesN][4], const SequenceMask& mask,
                                            int q0, int row0, int key0, int fr, int fc) {
  using A = typename T::Arch;
#pragma unroll
  for (int mt = 0; mt < T::kSdPTilesM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + mt * A::kTileRows + fr + A::kHalfRows * r;
      const int64_t diag = static_cast<int64_t>(q0 + row) + mask.offset;
      const int64_t lo64 = mask.left >= 0 ? diag - mask.left : 0;
      const int64_t hi64 = min(mask.seqlen_k - 1, mask.right >= 0 ? diag + mask.right : mask.seqlen_k);
      const int lo = static_cast<int>(max(int64_t{0}, min(lo64, (int64_t{1} << 31) - 1)));
      const int hi = static_cast<int>(max(int64_t{-1}, hi64));
#pragma unroll
      for (int nt = 0; nt < T::kSdPTilesN; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int j = key0 + nt * A::kFragCols + fc + c;
          if (j < lo || j > hi) acc[mt][nt][2 * r + c] = -INFINITY;
        }
    }
}

}  // namespace fastattn::cuda
