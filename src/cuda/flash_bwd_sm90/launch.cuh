// launch.cuh — the sm90 backward launcher: the sm80 backward's prepare kernel and (atomic dQ)
// convert kernel (flash_bwd/prepare.cuh), or the tile modes' own (dq_convert.cuh), around the
// sm90 main kernel, whose tensor maps (q, dout in boxes of
// kBlockM rows; k, v in boxes of kBlockN) come from sm90/tensor_map.hpp. Included only by the
// generated sm90 units (src/cuda/generated/flash_bwd_sm90_*), compiled for sm_90a alone.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_bwd/prepare.cuh"
#include "cuda/flash_bwd_sm90/dq_convert.cuh"
#include "cuda/flash_bwd_sm90/kernel.cuh"
#include "cuda/flash_bwd_sm90/launch.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_bwd_sm90/traits.cuh"
#include "cuda/sm90/tensor_map.hpp"

namespace fastattn::cuda {

// The kernel instance of (soft-cap, dQ reduction, deterministic) for traits T (padded batches)
// or Sm90VarlenTraits<T>. Head dims without room for the bulk dQ tiles (T::kBulkDqFits false:
// d = 256) have no bulk instances; their plan never asks for one (plan.hpp: plan_backward_sm90).
template <class T>
auto sm90_backward_kernel(bool softcap, Sm90DqReduction dq, bool deterministic) {
  auto pick = [&](auto softcap_tag) {
    constexpr bool kSoftcap = decltype(softcap_tag)::value;
    using R = Sm90DqReduction;
    if (dq == R::bulk) {
      if constexpr (T::kBulkDqFits) {
        return deterministic ? flash_backward_sm90_kernel<T, kSoftcap, R::bulk, true>
                             : flash_backward_sm90_kernel<T, kSoftcap, R::bulk, false>;
      } else {
        throw Error(ErrorCode::internal, "cuda backward (sm90): bulk dQ planned where its tiles do not fit");
      }
    }
    if (dq == R::atomic_tiles) {
      return deterministic ? flash_backward_sm90_kernel<T, kSoftcap, R::atomic_tiles, true>
                           : flash_backward_sm90_kernel<T, kSoftcap, R::atomic_tiles, false>;
    }
    return deterministic ? flash_backward_sm90_kernel<T, kSoftcap, R::atomic, true>
                         : flash_backward_sm90_kernel<T, kSoftcap, R::atomic, false>;
  };
  return softcap ? pick(std::true_type{}) : pick(std::false_type{});
}

template <typename Element, int kHeadDim>
void run_backward_sm90(const BackwardParams& p, cudaStream_t stream) {
  using T = Sm90BackwardTraits<kHeadDim, Element>;
  constexpr bool kBf16 = std::is_same_v<Element, __nv_bfloat16>;
  const bool varlen = p.cu_seqlens_q != nullptr;
  if (p.num_splits != 1) {
    throw Error(ErrorCode::internal, "cuda backward (sm90): planned for dQ splits, which it does not serve");
  }
  const auto dq = static_cast<Sm90DqReduction>(p.sm90_dq);
  const std::string config = "sm90 d" + std::to_string(kHeadDim) + ", " + std::to_string(T::kBlockM) + "x" +
                             std::to_string(T::kBlockN) +
                             (dq == Sm90DqReduction::bulk           ? ", bulk dQ"
                              : dq == Sm90DqReduction::atomic_tiles ? ", atomic-tiles dQ"
                                                                    : ", atomic dQ") +
                             (p.deterministic ? ", deterministic" : "") + (varlen ? ", varlen" : "");
  // The tile modes' convert kernel: one CTA per (batch, query block, head, warpgroup tile); those
  // past a varlen sequence return at once. (Checked before anything runs; unreachable in
  // practice: the query tokens x heads would pass 2^36.)
  const int64_t dq_tile_ctas = static_cast<int64_t>(p.batch) * ((p.seqlen_q + T::kBlockM - 1) / T::kBlockM) *
                               p.num_heads * T::kMmaWarpgroups;
  if (sm90_dq_in_tiles(dq) && dq_tile_ctas > (int64_t{1} << 31) - 1) {
    throw Error(ErrorCode::internal, "cuda backward (sm90): more dQ tiles than a 1-D grid holds, " + config);
  }
  if (p.total_q > 0) {
    // The dQ accumulator and, in deterministic mode, the semaphores after it.
    check(cudaMemsetAsync(p.dq_accum, 0, p.zero_bytes, stream), "cudaMemsetAsync", "dQ accumulator, " + config);
    constexpr int kThreads = 256;
    constexpr int kChunks = kHeadDim / 8;
    constexpr int kLanes = kChunks <= 8 ? 8 : kChunks <= 16 ? 16 : 32;
    const int64_t items = p.total_q * p.num_heads;
    const int64_t blocks = (items + kThreads / kLanes - 1) / (kThreads / kLanes);
    backward_dot_kernel<Element, kHeadDim><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    check_launch("backward_dot_kernel<" + config + ">");
  }
  const int64_t n_blocks = (p.seqlen_k + T::kBlockN - 1) / T::kBlockN;
  const int64_t tiles = n_blocks * p.num_kv_heads * p.batch;
  if (tiles > 0 && p.seqlen_q > 0) {
    // Padded: (d, seqlen, heads, batch). Varlen: (d, total tokens, heads, 1); the kernel adds
    // the sequence's first token to the row (its batch strides are unused). A varlen batch
    // without query (key) tokens still runs, so dK and dV are written (zeros); its CTAs have no
    // steps and load nothing, so the one-row map of an empty tensor is never read.
    const int64_t batch = varlen ? 1 : p.batch;
    const int64_t rows_q = varlen ? std::max<int64_t>(p.total_q, 1) : p.seqlen_q;
    const int64_t rows_k = varlen ? std::max<int64_t>(p.total_k, 1) : p.seqlen_k;
    const CUtensorMap map_q = sm90::make_token_tensor_map(
        {p.q, batch, rows_q, p.num_heads, kHeadDim, p.q_batch_stride, p.q_token_stride, p.q_head_stride}, kBf16,
        T::kBlockM, "q");
    const CUtensorMap map_do = sm90::make_token_tensor_map(
        {p.dout, batch, rows_q, p.num_heads, kHeadDim, p.do_batch_stride, p.do_token_stride, p.do_head_stride},
        kBf16, T::kBlockM, "dout");
    const CUtensorMap map_k = sm90::make_token_tensor_map(
        {p.k, batch, rows_k, p.num_kv_heads, kHeadDim, p.k_batch_stride, p.k_token_stride, p.k_head_stride}, kBf16,
        T::kBlockN, "k");
    const CUtensorMap map_v = sm90::make_token_tensor_map(
        {p.v, batch, rows_k, p.num_kv_heads, kHeadDim, p.v_batch_stride, p.v_token_stride, p.v_head_stride}, kBf16,
        T::kBlockN, "v");
    const bool softcap = p.softcap > 0.0f;
    const auto kernel = varlen ? sm90_backward_kernel<Sm90VarlenTraits<T>>(softcap, dq, p.deterministic)
                               : sm90_backward_kernel<T>(softcap, dq, p.deterministic);
    const std::string name = "flash_backward_sm90_kernel<" + config + ">";
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
          "cudaFuncSetAttribute", name);
    kernel<<<static_cast<unsigned>(tiles), T::kThreads, T::kSmemBytes, stream>>>(p, map_q, map_k, map_v, map_do);
    check_launch(name);
  }
  if (p.total_q > 0 && sm90_dq_in_tiles(dq)) {
    sm90_convert_dq_tiles_kernel<T><<<static_cast<unsigned>(dq_tile_ctas), 128, 0, stream>>>(p);
    check_launch("sm90_convert_dq_tiles_kernel<" + config + ">");
  } else if (p.total_q > 0) {
    constexpr int kThreads = 256;
    const int64_t items = p.total_q * p.num_heads * (kHeadDim / 4);
    const int64_t blocks = (items + kThreads - 1) / kThreads;
    backward_convert_dq_kernel<Element, kHeadDim><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    check_launch("backward_convert_dq_kernel<" + config + ">");
  }
}

}  // namespace fastattn::cuda
