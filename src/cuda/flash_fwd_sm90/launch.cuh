// launch.cuh — the sm90 forward launcher: tensor maps of q, k, v (sm90/tensor_map.hpp), the
// kernel's shared memory, the tile schedule and its grid (tile_scheduler.cuh). Included only by the generated sm90
// units (src/cuda/generated/flash_fwd_sm90_*), compiled for sm_90a alone. The dynamic
// scheduler's launcher is launch_dynamic.cuh.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/common/cuda_check.hpp"
#include "cuda/flash_fwd_sm90/kernel.cuh"
#include "cuda/flash_fwd_sm90/launch.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/flash_fwd_sm90/traits.cuh"
#include "cuda/sm90/tensor_map.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// The kernel of one (softcap, overlap, wg_order) choice, padded or varlen.
// The wide key tile (T::kUnmaskedCallsOnly) has no soft-cap kernels (plan.hpp); the d = 64
// narrow tile (T::kNarrowD64) only the overlap kernels without a soft-cap, and the d = 128
// short tile (T::kShortD128, one consumer warpgroup) only the unordered one of them.
template <class T, bool kVarlen>
auto sm90_forward_kernel(bool softcap, bool overlap, bool wg_order) {
  if constexpr (T::kShortD128) {
    (void)softcap;
    (void)overlap;
    (void)wg_order;
    return flash_forward_sm90_kernel<T, false, true, kVarlen>;
  } else if constexpr (T::kNarrowD64) {
    (void)softcap;
    (void)overlap;
    return wg_order ? flash_forward_sm90_kernel<T, false, true, kVarlen, true>
                    : flash_forward_sm90_kernel<T, false, true, kVarlen>;
  } else {
    (void)wg_order;  // three consumer warpgroups have no ordered kernel
    constexpr bool kCap = !T::kUnmaskedCallsOnly;  // whether soft-cap kernels are compiled
    auto kernel = softcap ? flash_forward_sm90_kernel<T, kCap, false, kVarlen>
                          : flash_forward_sm90_kernel<T, false, false, kVarlen>;
    if constexpr (T::kOverlapFits) {  // no spilling overlap kernels compiled otherwise
      bool ordered = false;
      if constexpr (T::kConsumerWarpgroups == 2) {  // the ordered issue is between two warpgroups
        ordered = overlap && wg_order;
        if (ordered) {
          kernel = softcap ? flash_forward_sm90_kernel<T, kCap, true, kVarlen, true>
                           : flash_forward_sm90_kernel<T, false, true, kVarlen, true>;
        }
      }
      if (overlap && !ordered) {
        kernel = softcap ? flash_forward_sm90_kernel<T, kCap, true, kVarlen>
                         : flash_forward_sm90_kernel<T, false, true, kVarlen>;
      }
    }
    return kernel;
  }
}

// Whether a call has tiles to run; a varlen call the plan should have declined throws.
inline bool sm90_forward_has_work(const ForwardParams& p) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  if (p.seqlen_q == 0 || p.batch == 0 || p.num_heads == 0 || (varlen && p.total_q == 0)) return false;
  if (varlen && (!kSm90Varlen || p.total_k == 0)) {  // the plan declines these (heuristics.hpp)
    throw Error(ErrorCode::internal, "cuda forward (sm90): a varlen call the plan should have declined");
  }
  return true;
}

// What every scheduler's launch needs: the tensor maps of q, k, v, the tile schedule, its grid,
// and the kernel's name for errors.
struct Sm90ForwardSetup {
  CUtensorMap map_q, map_k, map_v;
  CUtensorMap map_o{};  // tma_store_o only (else zeros)
  bool tma_store_o = false;  // the epilogue's TMA store (epilogue.cuh)
  Sm90TileSchedule schedule;
  dim3 grid;
  bool overlap, wg_order, softcap, varlen;
  int device = 0;  // the current device
  std::string name;
};

template <class T>
Sm90ForwardSetup sm90_forward_setup(const ForwardParams& p, const Sm90LaunchChoice& choice) {
  constexpr int kHeadDim = T::kHeadDim;
  constexpr bool kBf16 = std::is_same_v<typename T::Element, __nv_bfloat16>;
  Sm90ForwardSetup s;
  s.varlen = p.cu_seqlens_q != nullptr;
  const int64_t kv_heads = p.num_heads / p.group_size;
  // Padded: (head_dim, seqlen, heads, batch). Varlen: (head_dim, total tokens, heads, 1), the
  // packed tokens of every sequence (producer.cuh loads at each sequence's offset).
  const int64_t batch = s.varlen ? 1 : p.batch;
  const int64_t tokens_q = s.varlen ? p.total_q : p.seqlen_q, tokens_k = s.varlen ? p.total_k : p.seqlen_k;
  s.map_q = sm90::make_token_tensor_map(
      {p.q, batch, tokens_q, p.num_heads, kHeadDim, p.q_batch_stride, p.q_token_stride, p.q_head_stride}, kBf16,
      T::kBlockM, "q");
  s.map_k = sm90::make_token_tensor_map(
      {p.k, batch, tokens_k, kv_heads, kHeadDim, p.k_batch_stride, p.k_token_stride, p.k_head_stride}, kBf16,
      T::kBlockN, "k");
  s.map_v = sm90::make_token_tensor_map(
      {p.v, batch, tokens_k, kv_heads, kHeadDim, p.v_batch_stride, p.v_token_stride, p.v_head_stride}, kBf16,
      T::kBlockN, "v");
  // The TMA store of O where the plan chose it (heuristics.hpp: padded calls whose out TMA can
  // describe) and the tile has room for sO (epilogue.cuh says why varlen calls store directly).
  s.tma_store_o = T::kOutputTile && choice.tma_store && !s.varlen;
  if (s.tma_store_o) {
    s.map_o = sm90::make_token_tensor_map({p.out, batch, p.seqlen_q, p.num_heads, kHeadDim, p.o_batch_stride,
                                           p.o_token_stride, p.o_head_stride},
                                          kBf16, 64, "out");
  }
  s.overlap = T::kNarrowD64 || (choice.overlap && T::kOverlapFits);
  s.wg_order = s.overlap && choice.wg_order;
  s.softcap = p.softcap > 0.0f;
  // The L2 size sets the persistent schedule's head sections (tile_scheduler.cuh).
  int l2_bytes = 0;
  check(cudaGetDevice(&s.device), "cudaGetDevice", "sm90 forward");
  check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, s.device), "cudaDeviceGetAttribute", "L2 size");
  s.schedule = Sm90TileScheduler<T>::schedule(p, choice.scheduler, choice.sections, l2_bytes, choice.cta_slots);
  s.grid = Sm90TileScheduler<T>::grid(p, s.schedule, choice.cta_slots);
  s.name = "flash_forward_sm90_kernel<d" + std::to_string(kHeadDim) + ", " + std::to_string(T::kBlockM) + "x" +
           std::to_string(T::kBlockN) + (s.overlap ? ", overlap" : "") + (s.wg_order ? ", wg order" : "") +
           (s.varlen ? ", varlen" : "") + (s.tma_store_o ? ", TMA store" : "") + ", " + to_string(choice.scheduler) + ">";
  return s;
}

// Two-CTA clusters (plan.hpp: sm90_cluster; kernel.cuh kCluster): the ordered overlap kernel
// without soft-cap, padded, launched with a cluster dimension of (2, 1, 1) on a persistent grid
// of whole clusters, at most as many as the device can hold at once (with one CTA per SM, two
// SMs of one GPC each: cudaOccupancyMaxActiveClusters). The plan asked for an even number of
// query blocks, so the tile count is even and both CTAs of a cluster take as many tiles, 2j and
// 2j + 1 (tile_scheduler.cuh's persistent numbering with one (head, batch) per section).
template <class T>
void launch_forward_sm90_cluster(const ForwardParams& p, const Sm90ForwardSetup& s, cudaStream_t stream) {
  if constexpr (sm90_cluster_compiled(T::kHeadDim) && T::kBlockN == 128 && T::kConsumerWarpgroups == 2 &&
                !T::kNarrowD64 && !T::kUnmaskedCallsOnly) {
    if (s.varlen || s.softcap || !s.overlap || !s.wg_order || !s.schedule.persistent || s.schedule.section_hb != 1 ||
        s.schedule.m_blocks % kSm90ClusterSize != 0) {
      throw Error(ErrorCode::internal, "cuda forward (sm90): a two-CTA cluster launch the plan should not have made (" +
                                           s.name + ")");
    }
    auto kernel = flash_forward_sm90_kernel<T, false, true, false, true, true>;
    const std::string name = s.name + " in two-CTA clusters";
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
          "cudaFuncSetAttribute", name);
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = kSm90ClusterSize;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = s.grid;
    config.blockDim = dim3(T::kThreads);
    config.dynamicSmemBytes = T::kSmemBytes;
    config.stream = stream;
    config.attrs = &cluster;
    config.numAttrs = 1;
    // Asked once per device (a driver query per call would add host time to every call), for a
    // grid of one cluster as CUTLASS does (KernelHardwareInfo::query_device_max_active_clusters).
    constexpr int kMaxDevices = 64;
    static std::array<std::atomic<int>, kMaxDevices> max_clusters{};  // 0: not asked yet
    const bool cached = s.device >= 0 && s.device < kMaxDevices;
    int clusters = cached ? max_clusters[static_cast<std::size_t>(s.device)].load() : 0;
    if (clusters == 0) {
      config.gridDim = dim3(kSm90ClusterSize);
      check(cudaOccupancyMaxActiveClusters(&clusters, kernel, &config), "cudaOccupancyMaxActiveClusters", name);
      if (cached && clusters > 0) max_clusters[static_cast<std::size_t>(s.device)] = clusters;
    }
    if (clusters < 1) {
      throw Error(ErrorCode::unsupported, "cuda forward (sm90): the device holds no cluster of two CTAs of " + name +
                                              " (" + std::to_string(T::kSmemBytes) + " bytes of shared memory each)");
    }
    const int64_t ctas = std::min<int64_t>(s.grid.x, int64_t{kSm90ClusterSize} * clusters);
    config.gridDim = dim3(static_cast<unsigned>(ctas / kSm90ClusterSize * kSm90ClusterSize));
    check(cudaLaunchKernelEx(&config, kernel, p, s.schedule, s.map_q, s.map_k, s.map_v, s.map_o,
                             s.tma_store_o ? 1 : 0),
          "cudaLaunchKernelEx", name);
    check_launch(name);
  } else {
    (void)p;
    (void)stream;
    throw Error(ErrorCode::internal, "cuda forward (sm90): no two-CTA cluster kernel is compiled for " + s.name);
  }
}

// One traits' launch (the head dim's key tile or the wide one).
template <class T>
void launch_forward_sm90(const ForwardParams& p, const Sm90LaunchChoice& choice, cudaStream_t stream) {
  if constexpr (T::kUnmaskedCallsOnly) {
    // The plan never asks for these (plan.hpp): no varlen or soft-cap kernel of the wide tile is
    // compiled (sm90_forward_kernel would pick one without the soft-cap), and its loop has no
    // mask code.
    if (p.cu_seqlens_q != nullptr || p.softcap > 0.0f || p.window_left >= 0 || p.window_right >= 0) {
      throw Error(ErrorCode::internal, "cuda forward (sm90): the wide key tile serves no varlen, soft-capped or masked call");
    }
  }
  if constexpr (T::kNarrowD64 || T::kShortD128) {  // likewise (plan.hpp: sm90_d64_narrow_block_m, sm90_d128_short_block_m)
    if (p.cu_seqlens_q != nullptr || p.softcap > 0.0f) {
      throw Error(ErrorCode::internal, std::string("cuda forward (sm90): the ") +
                                           (T::kNarrowD64 ? "d64 narrow" : "d128 short") +
                                           " tile serves no varlen or soft-capped call");
    }
  }
  const Sm90ForwardSetup s = sm90_forward_setup<T>(p, choice);
  if (choice.cluster) return launch_forward_sm90_cluster<T>(p, s, stream);
  auto kernel = sm90_forward_kernel<T, false>(s.softcap, s.overlap, s.wg_order);
  if constexpr (T::kVarlenKernels) {  // none compiled for the wide and narrow tiles, nor with kSm90Varlen off
    if (s.varlen) kernel = sm90_forward_kernel<T, true>(s.softcap, s.overlap, s.wg_order);
  }
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes),
        "cudaFuncSetAttribute", s.name);
  if constexpr (T::kCtasPerSm > 1) {
    // Two CTAs of the short tile need the SM's whole shared memory (plan.hpp: sm90_ctas_per_sm);
    // the carveout is otherwise the driver's choice.
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared),
          "cudaFuncSetAttribute", s.name);
  }
  kernel<<<s.grid, T::kThreads, T::kSmemBytes, stream>>>(p, s.schedule, s.map_q, s.map_k, s.map_v, s.map_o,
                                                          s.tma_store_o ? 1 : 0);
  check_launch(s.name);
}

// The call's params with the windows clamped to seqlen_q + seqlen_k, so the kernel's position
// arithmetic fits 32 bits (plan.hpp: kSm90MaxPositions; the same mask, as a window that wide
// bounds no query); a call past that limit the plan should have declined throws.
inline ForwardParams sm90_params_with_32bit_positions(const ForwardParams& p) {
  if (!sm90_positions_fit(p.seqlen_q, p.seqlen_k)) {
    throw Error(ErrorCode::internal, "cuda forward (sm90): seqlen_q + seqlen_k = " +
                                         std::to_string(int64_t{p.seqlen_q} + p.seqlen_k) +
                                         " reaches 2^29, a call the plan should have declined");
  }
  ForwardParams clamped = p;
  clamped.window_left = sm90_clamped_window(p.window_left, p.seqlen_q, p.seqlen_k);
  clamped.window_right = sm90_clamped_window(p.window_right, p.seqlen_q, p.seqlen_k);
  return clamped;
}

template <typename Element, int kHeadDim>
void run_forward_sm90(const ForwardParams& call, const Sm90LaunchChoice& choice, cudaStream_t stream) {
  if (!sm90_forward_has_work(call)) return;
  const ForwardParams p = sm90_params_with_32bit_positions(call);
  // The dynamic scheduler's kernels are in units of their own (launch_dynamic.cuh).
  if (choice.scheduler == Sm90Scheduler::dynamic) return run_forward_sm90_dynamic<Element, kHeadDim>(p, choice, stream);
  if constexpr (sm90_wide_tile_compiled(kHeadDim)) {
    if (choice.block_n == kSm90WideBlockN) {
      return launch_forward_sm90<Sm90ForwardTraits<kHeadDim, Element, kSm90WideBlockN>>(p, choice, stream);
    }
  }
  if constexpr (kHeadDim == 64 && sm90_forward_blocks(64).block_m != kSm90D64NarrowBlockM) {
    if (choice.block_m == kSm90D64NarrowBlockM) {
      return launch_forward_sm90<Sm90ForwardTraits<64, Element, 0, kSm90D64NarrowBlockM>>(p, choice, stream);
    }
  }
  if constexpr (sm90_d128_short_tile_compiled(kHeadDim)) {
    if (choice.block_m == kSm90D128ShortBlockM) {
      return launch_forward_sm90<Sm90ForwardTraits<kHeadDim, Element, 0, kSm90D128ShortBlockM>>(p, choice, stream);
    }
  }
  launch_forward_sm90<Sm90ForwardTraits<kHeadDim, Element>>(p, choice, stream);
}

}  // namespace fastattn::cuda
