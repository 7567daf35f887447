// heuristics.hpp — which forward kernel runs a CUDA call, and into how many key splits
// (split-KV) it is cut. Host-only, no CUDA headers: the dispatcher (src/api/dispatch.cpp)
// reports the plan and the backend (cuda_backend.cu) runs the same plan from the same inputs.
//
// 1. Kernel: seqlen_q <= kDecodeMaxSeqlenQ (decode, speculative decoding) takes the 16-row
//    kernel (kernel_decode.cuh), whose MMAs waste at most 15 padded rows instead of 127; longer
//    queries take the main kernel (kernel.cuh).
// 2. Splits: a CTA per (query block, head, batch) leaves SMs idle when there are few of them
//    (decode: batch * heads CTAs). flash-attn 2's num_splits_heuristic (flash_api.cpp) then cuts
//    each query block's key tiles into num_splits ranges, one CTA each, choosing the smallest
//    split count whose wave efficiency (CTAs / (waves * slots)) is within 85% of the best;
//    slots = SMs * CTAs resident per SM. At most kMaxSplits splits, and at least
//    kMinTilesPerSplit key tiles per split so that the combine pass stays small against the
//    K/V reads. The partials are merged by flash_combine_kernel (combine.cuh).
// 3. FASTATTN_CUDA_NUM_SPLITS=n (1..128) forces n splits (tests, experiments); read here only.
// 4. Path (forward_path.hpp): the sm75 / sm70 paths have only the main kernel (no cp.async
//    ring for short queries), with their own blocks (launch_blocks.hpp: forward_blocks_for);
//    CTAs per SM follow from their shared memory (at most 2, the launch bounds).
// 5. sm90 path (Hopper, flash_fwd_sm90/): serves padded and varlen batches (varlen while
//    kSm90Varlen, plan.hpp) of head_dim 64/96/128/256 whose q, k, v TMA can describe, with
//    seqlen_q > kDecodeMaxSeqlenQ, keys, seqlen_q + seqlen_k below 2^29 (kSm90MaxPositions)
//    and no split-KV; any other call runs the sm80 plan, and
//    sm90_decline_reason names why (KernelChoice::reason).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "common/environment.hpp"
#include "cuda/flash_fwd/launch_blocks.hpp"
#include "cuda/flash_fwd/split_layout.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/forward_path.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

constexpr int kMaxSplits = 128;
constexpr int kMinTilesPerSplit = 4;
constexpr int kMainCtasPerSm = 2;        // kernel.cuh: __launch_bounds__(128, 2), 255 registers
constexpr int kSmemReservedPerCta = 1024;  // the driver's per-CTA shared-memory reservation (sm80+)
constexpr const char* kNumSplitsEnv = "FASTATTN_CUDA_NUM_SPLITS";

// What the plan depends on.
struct ForwardShape {
  std::int64_t batch = 0, num_heads = 0, head_dim = 0;
  std::int64_t seqlen_q = 0, seqlen_k = 0;  // varlen: the longest sequences
  std::int64_t total_q = 0;                 // scratch rows per head (split_layout.hpp)
  std::int64_t total_k = 0;                 // key tokens (varlen: k.shape[0]); read for varlen only
  std::int64_t window_left = -1, window_right = -1;
  int multiprocessors = 0;          // cudaDevAttrMultiProcessorCount
  int smem_per_multiprocessor = 0;  // bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor
  double dram_gbs_per_multiprocessor = 0.0;  // peak DRAM GB/s over the SMs (0: unknown; cuda_backend.cu)
  ForwardPath path = ForwardPath::sm80;
  bool path_forced = false;  // by FASTATTN_CUDA_PATH
  std::int64_t query_group = 1;  // query heads packed as rows per KV head (query_groups.hpp)
  std::int64_t heads_per_kv_head = 1;  // GQA / MQA: query heads sharing a KV head (1: MHA)
  bool varlen = false;
  bool softcap = false;
  bool tma_describes = true;  // q, k, v: layouts TMA can load (flash_fwd_sm90/plan.hpp)
  bool out_tma_describes = true;  // out: a layout TMA can store (the sm90 epilogue's TMA store)
  // The KV-cache route (forward_uses_kv_cache_kernel): the call's seqlen_q before GQA packing,
  // and, when non-empty, why the KV-cache kernel's row tile fits no ring of it in the device's
  // opt-in shared memory per block (kv_cache_heuristics.hpp: kv_smem_decline_reason).
  std::int64_t query_tokens = 0;
  std::string kv_cache_unfit;
};

// Which kernel family runs a forward call: the flash kernels (kernel.cuh, kernel_decode.cuh,
// the sm90 kernels, by path) or the KV-cache kernel (src/cuda/inference/kv_cache_kernel.cuh).
// Typed, so the backend runs the plan without reading KernelChoice (a report) back.
enum class ForwardKernel { flash, kv_cache };

struct ForwardPlan {
  ForwardPath path = ForwardPath::sm80;
  bool path_forced = false;
  std::int64_t query_group = 1;  // > 1: GQA decode, a KV head's query heads are the query rows
  bool short_query = false;  // kernel_decode.cuh, else kernel.cuh
  ForwardBlocks blocks{};
  int multiprocessors = 0;
  int ctas_per_sm = 0;       // resident CTAs per SM (shared memory / launch bounds)
  std::int64_t ctas = 0;     // batch * heads * query blocks, before splitting
  std::int64_t n_blocks = 0; // key tiles one query block visits, at most
  int num_splits = 1;
  bool forced = false;       // by FASTATTN_CUDA_NUM_SPLITS
  float wave_efficiency = 0.0f;
  std::size_t workspace_bytes = 0;
  // Non-empty when the device's path is sm90 but this call runs the sm80 plan: why.
  std::string sm90_declined;
  int sm90_stages = 0;  // sm90 plans: (K, V) stages of the ring
  bool sm90_overlap = false;  // sm90 plans: softmax overlapped with the next GEMMs (plan.hpp)
  int sm90_exp2_poly_every = 0;  // sm90 plans: 1 n8 fragment in N of the softmax's exponentials on the FMA pipe (0: none)
  bool sm90_wg_order = false;  // sm90 overlap plans: the consumer warpgroups issue GEMMs in turn
  bool sm90_cluster = false;   // sm90 plans: two-CTA clusters sharing the K/V loads (plan.hpp)
  Sm90Scheduler sm90_scheduler = Sm90Scheduler::persistent;  // sm90 plans: tile order (plan.hpp)
  Sm90Sections sm90_sections = Sm90Sections::l2_half;        // sm90 persistent plans: the order's sections
  bool sm90_tma_store = false;                               // sm90 plans: O by TMA store where possible
  int sm90_block_m = 0;  // sm90 plans: 0 the head dim's query tile, kSm90D64NarrowBlockM d = 64's narrow
                         // one, kSm90D128ShortBlockM d = 128's short one
  std::int64_t sm90_key_tiles = 0;  // sm90 plans: key tiles per query tile, on average
  ForwardKernel kernel = ForwardKernel::flash;
  // kernel == kv_cache: the KV-cache kernel's launch plan (kernels resolved, scratch, reason),
  // filled by cuda_backend.cu's forward_plan from the call.
  KVCacheLaunch kv_cache;
  // Non-empty when forward_uses_kv_cache_kernel chose the KV-cache kernel but no ring of it fits
  // the device's opt-in shared memory per block (kv_cache_heuristics.hpp: kv_smem_decline_reason),
  // so the 16-row decode kernel above runs the call instead: why.
  std::string kv_cache_declined;
};

// 5. Short queries (seqlen_q <= kDecodeMaxSeqlenQ) of a padded (not varlen) batch on the sm80
//    path, and on the sm90 path (which has no decode kernel of its own yet), run on the KV-cache kernel (src/cuda/inference/kv_cache_kernel.cuh: every query head of
//    a KV head and every query token packed as rows of one tile, any mask, 4 warps, a 3-stage
//    cp.async ring), their K/V taken as a contiguous cache (kv_cache_forward.hpp). Varlen calls
//    and the sm75 / sm70 paths keep the kernels above; so do calls whose row tile fits no ring of
//    the KV-cache kernel in the device's opt-in shared memory per block (sm86 / sm89 / sm120:
//    101,376 B; d256: ForwardShape::kv_cache_unfit, ForwardPlan::kv_cache_declined). plan_forward
//    decides (ForwardPlan::kernel); cuda_backend.cu's forward_plan fills the KV-cache launch.
inline bool forward_uses_kv_cache_kernel(ForwardPath path, bool varlen, std::int64_t seqlen_q) {
  return (path == ForwardPath::sm80 || path == ForwardPath::sm90) && !varlen && seqlen_q >= 1 &&
         seqlen_q <= kDecodeMaxSeqlenQ;
}

// flash-attn 2's num_splits_heuristic (csrc/flash_attn/flash_api.cpp), with `slots` for its
// num_SMs (it passes 2 * SMs for two CTAs per SM). Split counts that give the same tiles per
// split as a smaller count are skipped (64 tiles: 11 splits of 6 and 12 splits of 6 are the same).
inline int num_splits_heuristic(std::int64_t ctas, std::int64_t slots, std::int64_t n_blocks,
                                int max_splits) {
  if (ctas <= 0 || static_cast<double>(ctas) >= 0.8 * static_cast<double>(slots)) return 1;  // empty, or (almost) a full wave
  max_splits = static_cast<int>(std::min<std::int64_t>({max_splits, slots, n_blocks}));
  if (max_splits <= 1) return 1;
  auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  auto eligible = [&](int s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); };
  auto efficiency = [&](int s) {
    const double waves = static_cast<double>(ctas) * s / static_cast<double>(slots);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s)) best = std::max(best, efficiency(s));
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (eligible(s) && efficiency(s) >= 0.85 * best) return s;
  }
  return 1;
}

// FASTATTN_CUDA_NUM_SPLITS, or 0 when unset or empty, from the process's snapshot
// (common/environment.hpp).
inline int forced_num_splits() { return static_cast<int>(env_integer(EnvVar::cuda_num_splits, 1, kMaxSplits, 0)); }

inline ForwardPlan plan_forward(const ForwardShape& s);
inline ForwardPlan plan_flash_forward(const ForwardShape& s);

// Why the sm90 kernel does not serve a call, given the sm80 plan it would otherwise take; empty
// when it does. The order is the report's: the first reason that applies.
inline std::string sm90_decline_reason(const ForwardShape& s, const ForwardPlan& sm80_plan) {
  if (!sm90_has_head_dim(s.head_dim)) {
    return "no sm90 kernel for head_dim " + std::to_string(s.head_dim) + " (sm90 has 64, 96, 128 and 256)";
  }
  if (s.varlen && !kSm90Varlen) return "varlen batches: the sm90 varlen kernels are switched off (kSm90Varlen)";
  if (!s.tma_describes) {
    return "a q/k/v layout TMA cannot load (base or a stride not a multiple of 16 bytes, or a stride of 0)";
  }
  if (s.seqlen_k == 0 || (s.varlen && s.total_k == 0)) return "no keys";
  if (!sm90_positions_fit(s.seqlen_q, s.seqlen_k)) {
    return "positions past the sm90 kernel's 32 bits: seqlen_q + seqlen_k = " +
           std::to_string(s.seqlen_q + s.seqlen_k) + " reaches 2^29 (kSm90MaxPositions)";
  }
  if (sm80_plan.short_query) {
    return s.varlen ? "varlen with seqlen_q <= 16 runs the 16-row decode kernel"
                    : "seqlen_q <= 16 runs the KV-cache decode kernel";
  }
  if (sm80_plan.num_splits > 1) {
    return sm80_plan.forced ? "split-KV (" + std::to_string(sm80_plan.num_splits) + " splits forced by " +
                                  kNumSplitsEnv + ") has no sm90 kernel yet"
                            : "split-KV (too few CTAs for the SMs) has no sm90 kernel yet";
  }
  return {};
}

// block_n: 0 for the head dim's key tile, else the wide one (plan.hpp: sm90_wide_block_n);
// block_m: 0 for the head dim's query tile, else d = 64's narrow one (sm90_d64_narrow_block_m)
// or d = 128's short one (sm90_d128_short_block_m).
inline ForwardPlan plan_forward_sm90(const ForwardShape& s, int block_n, int block_m = 0) {
  ForwardPlan plan;
  const Sm90ForwardBlocks b = sm90_forward_blocks(s.head_dim, block_n, block_m);
  plan.path = ForwardPath::sm90;
  plan.path_forced = s.path_forced;
  plan.blocks = {b.block_m, b.block_n, b.threads};
  plan.sm90_block_m = block_m;
  plan.sm90_stages = b.stages;
  // The narrow d = 64 and short d = 128 tiles have overlap kernels only (launch.cuh); the
  // variable is still checked.
  const bool short_tile = block_m == kSm90D128ShortBlockM;
  plan.sm90_overlap = sm90_overlap(s.head_dim, block_m) || block_m == kSm90D64NarrowBlockM || short_tile;
  const bool masked = s.window_left >= 0 || s.window_right >= 0;
  plan.sm90_exp2_poly_every = sm90_exp2_poly_every(s.head_dim);  // a build switch (plan.hpp)
  plan.query_group = s.query_group;
  plan.multiprocessors = std::max(s.multiprocessors, 1);
  plan.ctas_per_sm = sm90_ctas_per_sm(b);
  const std::int64_t m_blocks = (s.seqlen_q + b.block_m - 1) / b.block_m;
  plan.ctas = s.batch * s.num_heads * m_blocks;
  std::int64_t keys = s.seqlen_k;
  if (s.window_left >= 0 && s.window_right >= 0) keys = std::min(keys, s.window_left + s.window_right + b.block_m);
  plan.n_blocks = (keys + b.block_n - 1) / b.block_n;
  // A mask bounded on one side only (causal) shows a query tile half the keys on average.
  const bool one_sided = (s.window_left >= 0) != (s.window_right >= 0);
  plan.sm90_key_tiles = one_sided ? (plan.n_blocks + 1) / 2 : plan.n_blocks;
  plan.sm90_scheduler = sm90_scheduler(plan.sm90_key_tiles, plan.sm90_overlap, masked, one_sided);
  // Varlen calls keep the L2-half sections: tiles past a short sequence are empty, so their
  // tiles are not all as long as another (plan.hpp: Sm90Sections). The short d = 128 tile
  // follows the 128-row tile's rule, its key tiles counted in 128 keys.
  const bool wave = block_m == kSm90D64NarrowBlockM ||
                    ((block_m == 0 || short_tile) && block_n == 0 &&
                     sm90_wave_sections_pay(s.head_dim, s.window_left < 0 && s.window_right >= 0,
                                            s.window_left >= 0 && s.window_right == 0, s.varlen, s.softcap,
                                            s.heads_per_kv_head,
                                            short_tile ? plan.sm90_key_tiles * b.block_n / 128 : plan.sm90_key_tiles,
                                            s.dram_gbs_per_multiprocessor));
  plan.sm90_sections = sm90_sections(masked || s.varlen, wave);
  // The dynamic scheduler's kernels store from registers (epilogue.cuh).
  plan.sm90_tma_store = sm90_tma_store() && sm90_output_tile_fits(b, s.head_dim) && !s.varlen &&
                        s.out_tma_describes && plan.sm90_scheduler != Sm90Scheduler::dynamic;
  // The variable is checked for every sm90 call, also those without the overlap kernels.
  // The ordered issue is between two consumer warpgroups (launch.cuh compiles it for those only).
  const bool two_consumer_warpgroups = b.block_m == 128;
  plan.sm90_wg_order = sm90_wg_order(plan.sm90_scheduler == Sm90Scheduler::persistent) && plan.sm90_overlap &&
                       two_consumer_warpgroups;
  if (plan.sm90_scheduler == Sm90Scheduler::dynamic) {
    plan.workspace_bytes = kSm90TileCounterBytes;  // its tile counter, zeroed per launch
    plan.sm90_wg_order = false;                    // no ordered dynamic kernel is compiled
  }
  plan.sm90_cluster = sm90_cluster({s.head_dim, block_n == 0 && block_m == 0, masked, s.varlen, s.softcap,
                                    plan.sm90_overlap, plan.sm90_wg_order, plan.sm90_scheduler, plan.sm90_sections,
                                    m_blocks});
  const double waves =
      static_cast<double>(plan.ctas) / (static_cast<double>(plan.multiprocessors) * plan.ctas_per_sm);
  plan.wave_efficiency = waves > 0.0 ? static_cast<float>(waves / std::ceil(waves)) : 0.0f;
  return plan;
}

inline ForwardPlan plan_forward_sm90(const ForwardShape& s) {
  // Causal (either alignment) and windows are masks; the wide key tile serves neither.
  const bool masked = s.window_left >= 0 || s.window_right >= 0;
  const bool one_sided = (s.window_left >= 0) != (s.window_right >= 0);
  const int wide = sm90_wide_block_n(s.head_dim, s.seqlen_k, masked, s.varlen, s.softcap);
  const int narrow = sm90_d64_narrow_block_m(s.head_dim, s.seqlen_k, one_sided, masked, s.varlen, s.softcap);
  const int short_tile = sm90_d128_short_block_m(s.head_dim, s.seqlen_k, one_sided, s.varlen, s.softcap);
  const int block_m = narrow != 0 ? narrow : short_tile;
  if (wide == 0 && block_m == 0) return plan_forward_sm90(s, 0);
  const ForwardPlan plan = plan_forward_sm90(s, wide, block_m);
  // The dynamic scheduler's kernels have the default tiles only.
  return plan.sm90_scheduler == Sm90Scheduler::dynamic ? plan_forward_sm90(s, 0) : plan;
}

// The route (5. above), then the flash plan: the one function that chooses a forward kernel.
inline ForwardPlan plan_forward(const ForwardShape& s) {
  const bool kv_route = forward_uses_kv_cache_kernel(s.path, s.varlen, s.query_tokens);
  if (kv_route && s.kv_cache_unfit.empty()) {
    ForwardPlan plan;
    plan.kernel = ForwardKernel::kv_cache;
    plan.path = ForwardPath::sm80;
    plan.path_forced = s.path_forced;
    plan.query_group = s.query_group;
    plan.short_query = true;
    plan.multiprocessors = std::max(s.multiprocessors, 1);
    plan.ctas_per_sm = 1;
    if (s.path == ForwardPath::sm90) plan.sm90_declined = "seqlen_q <= 16 runs the KV-cache decode kernel";
    return plan;
  }
  ForwardPlan plan = plan_flash_forward(s);
  if (kv_route) {
    plan.kv_cache_declined = s.kv_cache_unfit;  // the 16-row decode kernel runs it
    if (!plan.sm90_declined.empty()) plan.sm90_declined = "seqlen_q <= 16 runs an sm80 decode kernel";
  }
  return plan;
}

inline ForwardPlan plan_flash_forward(const ForwardShape& s) {
  if (s.path == ForwardPath::sm90) {
    ForwardShape base = s;
    base.path = ForwardPath::sm80;
    base.path_forced = false;
    ForwardPlan fallback = plan_flash_forward(base);
    std::string why = sm90_decline_reason(s, fallback);
    if (why.empty()) return plan_forward_sm90(s);
    fallback.path_forced = s.path_forced;
    fallback.sm90_declined = std::move(why);
    return fallback;
  }
  ForwardPlan plan;
  const int d = static_cast<int>(s.head_dim);
  plan.path = s.path;
  plan.path_forced = s.path_forced;
  plan.query_group = s.query_group;
  plan.short_query = s.path == ForwardPath::sm80 && s.seqlen_q <= kDecodeMaxSeqlenQ;
  plan.blocks = plan.short_query ? decode_blocks(d) : forward_blocks_for(s.path, d);
  if (plan.short_query) {
    const int smem = forward_smem_bytes(plan.blocks, d, kDecodeStages) + kSmemReservedPerCta;
    plan.ctas_per_sm = std::clamp(s.smem_per_multiprocessor / smem, 1, 16);
  } else if (s.path != ForwardPath::sm80) {
    const int smem = forward_smem_bytes_for(s.path, plan.blocks, d) + kSmemReservedPerCta;
    plan.ctas_per_sm = std::clamp(s.smem_per_multiprocessor / smem, 1, kMainCtasPerSm);
  } else {
    plan.ctas_per_sm = kMainCtasPerSm;
  }
  const std::int64_t m_blocks = (s.seqlen_q + plan.blocks.block_m - 1) / plan.blocks.block_m;
  plan.ctas = s.batch * s.num_heads * m_blocks;
  // Keys one query block can see: a two-sided window bounds them below seqlen_k.
  std::int64_t keys = s.seqlen_k;
  if (s.window_left >= 0 && s.window_right >= 0) {
    keys = std::min(keys, s.window_left + s.window_right + plan.blocks.block_m);
  }
  plan.n_blocks = (keys + plan.blocks.block_n - 1) / plan.blocks.block_n;

  plan.multiprocessors = std::max(s.multiprocessors, 1);
  const std::int64_t slots = static_cast<std::int64_t>(plan.multiprocessors) * plan.ctas_per_sm;
  const int forced = forced_num_splits();
  if (forced > 0) {
    plan.forced = true;
    plan.num_splits = forced;
  } else {
    const int max_splits = static_cast<int>(std::min<std::int64_t>(kMaxSplits, plan.n_blocks / kMinTilesPerSplit));
    plan.num_splits = num_splits_heuristic(plan.ctas, slots, plan.n_blocks, max_splits);
  }
  // The split index shares gridDim.x with the query block (at most 2^31 - 1).
  if (m_blocks > 0) {
    plan.num_splits = static_cast<int>(std::min<std::int64_t>(plan.num_splits, std::numeric_limits<int>::max() / m_blocks));
  }
  plan.num_splits = std::max(plan.num_splits, 1);
  const double waves = static_cast<double>(plan.ctas) * plan.num_splits / static_cast<double>(slots);
  plan.wave_efficiency = waves > 0.0 ? static_cast<float>(waves / std::ceil(waves)) : 0.0f;
  plan.workspace_bytes = split_workspace_bytes(plan.num_splits, s.num_heads, s.total_q, s.head_dim);
  return plan;
}

// The plan in words, for KernelChoice::reason.
inline std::string describe_plan(const ForwardPlan& plan) {
  if (plan.kernel == ForwardKernel::kv_cache) {
    return (plan.sm90_declined.empty() ? std::string()
                                       : "sm80 kernels on an sm90 device (" + plan.sm90_declined + "): ") +
           (plan.path_forced ? std::string("path forced by ") + kForwardPathEnv + ", " : std::string()) +
           plan.kv_cache.reason;
  }
  if (plan.path == ForwardPath::sm90) {
    const std::string per_sm = plan.ctas_per_sm == 2 ? "two per SM" : "one per SM";
    return std::string("sm90 path (Hopper): TMA loads by a producer warp, wgmma in ") +
           (plan.blocks.block_m == 64 ? std::string("1 consumer warpgroup")
                                      : std::to_string(plan.blocks.block_m / 64) + " consumer warpgroups") +
           " (setmaxnreg), " + std::to_string(plan.blocks.block_m) + "x" + std::to_string(plan.blocks.block_n) +
           " tiles, " + std::to_string(plan.sm90_stages) + "-stage K/V ring" +
           (plan.sm90_block_m == kSm90D64NarrowBlockM ? " (d64's narrow tile, for causal calls)" : "") +
           (plan.sm90_block_m == kSm90D128ShortBlockM ? " (d128's short tile, two CTAs per SM, for short causal calls)"
                                                       : "") +
           (plan.sm90_overlap ? ", softmax overlapped with the next tile's GEMMs" : ", GEMMs and softmax in turn") +
           (plan.sm90_exp2_poly_every > 0 ? ", 1 in " + std::to_string(plan.sm90_exp2_poly_every) +
                                                " of its exponentials on the FMA pipe"
                                          : std::string()) +
           (plan.sm90_wg_order ? ", the consumer warpgroups alternating their GEMM issue" : "") +
           (plan.sm90_tma_store ? ", O by TMA store from shared memory" : "") +
           (plan.sm90_cluster ? ", two-CTA clusters (query blocks 2j, 2j + 1) sharing each K/V tile by TMA multicast"
                              : "") +
           (plan.path_forced ? std::string(", path forced by ") + kForwardPathEnv : std::string()) + ", " +
           std::to_string(plan.ctas) + " tiles (query block, head, batch)" +
           (plan.sm90_scheduler == Sm90Scheduler::persistent
                ? ", persistent CTAs (" + per_sm + ", " + std::to_string(plan.multiprocessors * plan.ctas_per_sm) +
                      "), " +
                      (plan.sm90_sections == Sm90Sections::per_pair ? "a (head, batch) pair's query blocks together"
                       : plan.sm90_sections == Sm90Sections::wave
                           ? "sections of one wave, long and short tiles in turn"
                           : "longest tiles first")
            : plan.sm90_scheduler == Sm90Scheduler::dynamic
                ? ", persistent CTAs (" + per_sm + ", " + std::to_string(plan.multiprocessors * plan.ctas_per_sm) +
                      ") taking tiles from an atomic counter, longest tiles first"
                : ", one CTA per tile") +
           " (" + std::to_string(plan.sm90_key_tiles) + " key tiles per query tile)";
  }
  std::string r = plan.path == ForwardPath::sm75
                      ? "sm75 path (Turing): mma.sync m16n8k8, register-staged prefetch, "
                  : plan.path == ForwardPath::sm70
                      ? "sm70 path (Volta): mma.sync m8n8k4 quad pairs, register-staged prefetch, "
                  : plan.short_query ? "mma.sync m16n8k16, 16-query-row kernel (seqlen_q <= 16), "
                                     : "mma.sync m16n8k16 kernel, ";
  if (!plan.kv_cache_declined.empty()) r = "not the KV-cache kernel (" + plan.kv_cache_declined + "): " + r;
  if (!plan.sm90_declined.empty()) r = "sm80 kernels on an sm90 device (" + plan.sm90_declined + "): " + r;
  if (plan.path_forced) r += std::string("path forced by ") + kForwardPathEnv + ", ";
  if (plan.query_group > 1) {
    r += "GQA decode: the " + std::to_string(plan.query_group) +
         " query heads of each KV head packed as query rows (K/V read once per KV head), ";
  }
  r += std::to_string(plan.ctas) + " CTAs over (query block, head, batch)";
  const std::string slots = std::to_string(plan.multiprocessors) + " SMs x " + std::to_string(plan.ctas_per_sm);
  if (plan.num_splits <= 1) return r + (plan.forced ? "; 1 split forced by FASTATTN_CUDA_NUM_SPLITS" : "");
  char efficiency[16];
  std::snprintf(efficiency, sizeof efficiency, "%.2f", static_cast<double>(plan.wave_efficiency));
  r += "; split-KV: " + std::to_string(plan.num_splits) + " key splits of " + std::to_string(plan.n_blocks) +
       " tiles" + (plan.forced ? " forced by FASTATTN_CUDA_NUM_SPLITS" : " (too few CTAs for " + slots + " slots)") +
       ", wave efficiency " + efficiency + ", partials merged by a combine kernel";
  return r;
}

}  // namespace fastattn::cuda
