// kv_cache_plan.cu — the CUDA KV-cache attention's plan (kv_cache.hpp): from the shape (never
// from seqlens or block-table values) the row tile, K/V ring and loads, the split count
// (kv_cache_heuristics.hpp), the scratch, the launch form, and the kernels resolved from the
// generated units (kv_cache_run.hpp), with the reason for each choice in words.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

#include "common/environment.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/cuda_device.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/inference/kv_cache_pages.cuh"
#include "cuda/inference/kv_cache_run.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

std::string int_text(std::int64_t x) { return std::to_string(x); }

bool head_dim_compiled(std::int64_t head_dim) {
  for (int d : compiled_head_dims()) {
    if (d == head_dim) return true;
  }
  return false;
}

template <typename Element>
KVCacheKernels kernels_for_dtype(int head_dim, int rows_per_tile, int stages, bool softcap, KVLoad load) {
  (void)rows_per_tile;
  (void)stages;
  (void)softcap;
  (void)load;
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_64
    case 64: return kv_cache_kernels<Element, 64>(rows_per_tile, stages, softcap, load);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_96
    case 96: return kv_cache_kernels<Element, 96>(rows_per_tile, stages, softcap, load);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_128
    case 128: return kv_cache_kernels<Element, 128>(rows_per_tile, stages, softcap, load);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_256
    case 256: return kv_cache_kernels<Element, 256>(rows_per_tile, stages, softcap, load);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda kv_cache: no kernels for head_dim " + std::to_string(head_dim));
}

// FASTATTN_CUDA_KV_LOAD (README): unset or empty: the plan's choice; cp_async / tma: forced.
enum class KVLoadRequest { automatic, cp_async, tma };
KVLoadRequest kv_load_request() {
  const char* text = env_value(EnvVar::cuda_kv_load);
  if (text == nullptr || *text == '\0') return KVLoadRequest::automatic;
  if (std::strcmp(text, "cp_async") == 0) return KVLoadRequest::cp_async;
  if (std::strcmp(text, "tma") == 0) return KVLoadRequest::tma;
  throw Error(ErrorCode::invalid_argument,
              std::string(env_name(EnvVar::cuda_kv_load)) + ": expected cp_async or tma, got \"" + text + "\"");
}

// FASTATTN_CUDA_KV_PDL (README): 0: a plain launch; 1, or unset: a programmatic dependent
// launch where the device has it (compute capability 9.0 or newer: KVCacheLaunch::pdl).
bool kv_pdl_request() { return env_switch(EnvVar::cuda_kv_pdl, "1", "0", true); }

// Whether the KV-cache kernels' code on `device` was compiled for sm_90 or newer: below, the TMA
// kernels' TMA instructions are traps (kv_cache_tma.cuh) and the kernels do not wait on a
// programmatic dependency (kv_cache_kernel.cuh: griddepcontrol), so neither TMA loads nor a
// programmatic launch may be planned. The PTX version cudaFuncGetAttributes reports for one of
// them, cached per device (every kernel unit is compiled for the same architectures).
bool sm90_code_runs_on(const void* kernel, int device) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // 0: not asked, 1: no, 2: yes
  if (device >= 0 && device < kDevices) {
    const int k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k == 2;
  }
  const DeviceGuard device_guard(device);  // cudaFuncGetAttributes answers for the current device
  cudaFuncAttributes attributes{};
  check(cudaFuncGetAttributes(&attributes, kernel), "cudaFuncGetAttributes", "kv_cache_attention_kernel");
  const bool yes = attributes.ptxVersion >= 90;
  if (device >= 0 && device < kDevices) known[device].store(yes ? 2 : 1, std::memory_order_relaxed);
  return yes;
}

// Why TMA loads cannot serve this cache (kv_cache_heuristics.hpp: KVLoad), in words; empty when
// they can: an sm90 device, a tile inside one page (the contiguous cache, or pages of a multiple
// of the key tile), and what cuTensorMapEncodeTiled takes (16-byte aligned base and strides).
// Whether the build's code for the device is sm_90 is asked separately (sm90_code_runs_on).
std::string kv_tma_decline_reason(const KVCacheProblem& kp, int block_n) {
  const AttentionProblem& p = kp.attn;
  const int cc = compute_capability(p.device.index);
  if (cc / 10 != 9) return "TMA loads are for sm90 devices, this one is sm" + std::to_string(cc);
  if (kp.page_size < 1 || kp.num_pages < 1 || p.num_kv_heads < 1) return "the cache holds no keys";
  if (kp.is_paged() && kp.page_size % block_n != 0) {
    return "page size " + int_text(kp.page_size) + " is not a multiple of the " + std::to_string(block_n) +
           "-key tile (TMA loads whole tiles from one page)";
  }
  // Strides of dimensions of extent 1 are never stepped over (make_kv_tensor_maps replaces them).
  auto misaligned = [](std::int64_t elements, std::int64_t extent) { return extent > 1 && elements * 2 % 16 != 0; };
  for (const auto& [t, page_stride, name] :
       {std::tuple{p.k, kp.k_page_stride, "k cache"}, std::tuple{p.v, kp.v_page_stride, "v cache"}}) {
    if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0 || misaligned(t.stride.token, kp.page_size) ||
        misaligned(t.stride.head, p.num_kv_heads) || misaligned(page_stride, kp.num_pages)) {
      return std::string(name) + ": TMA needs a 16-byte aligned base and 16-byte multiples as strides";
    }
  }
  return {};
}

}  // namespace

KVCacheLaunch kv_cache_plan(const KVCacheProblem& kp, std::int64_t max_cache_len) {
  const AttentionProblem& p = kp.attn;
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported,
                std::string("cuda kv_cache: expected dtype f16 or bf16, got ") + to_string(p.dtype));
  }
  if (!FASTATTN_CUDA_PATH_SM80 || !head_dim_compiled(p.head_dim)) {
    std::string dims;
    for (int d : compiled_head_dims()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw Error(ErrorCode::unsupported, "cuda kv_cache: expected head_dim in {" + dims +
                                            "} (FASTATTN_CUDA_HEAD_DIMS of this build, sm80 units), got " +
                                            int_text(p.head_dim));
  }
  kv_cache_check_limits(kp);
  const int d = static_cast<int>(p.head_dim);
  const std::int64_t group = p.group_size();
  const std::int64_t rows = group * p.seqlen_q;
  const KVRowTile tile = kv_row_tile(rows, d);
  const std::int64_t row_blocks = (rows + tile.rows - 1) / tile.rows;

  const int block_n = kv_block_n(d);
  const int device = p.device.index;
  const int smem_limit = shared_memory_per_block(device);
  // Loads: cp.async, or TMA where it can serve the call (kv_tma_decline_reason) on its default
  // ring when FASTATTN_CUDA_KV_LOAD=tma asks (an error where it cannot serve) or kKVTmaByDefault.
  // Declining TMA after the kernels are resolved keeps the stages and split count sized for TMA's
  // shared memory (a little more than cp.async's): fine while TMA is opt-in.
  const KVLoadRequest request = kv_load_request();
  std::string not_tma =
      request == KVLoadRequest::cp_async ? "FASTATTN_CUDA_KV_LOAD=cp_async"
      : request == KVLoadRequest::automatic && !kKVTmaByDefault
          ? "cp.async measured faster on the H200 (kKVTmaByDefault; FASTATTN_CUDA_KV_LOAD=tma takes TMA)"
          : kv_tma_decline_reason(kp, block_n);
  if (not_tma.empty() && kv_smem_bytes(tile, d, kv_stages(d), KVLoad::tma) > smem_limit) {
    not_tma = "the TMA kernel's " + std::to_string(kv_smem_bytes(tile, d, kv_stages(d), KVLoad::tma)) +
              " bytes of shared memory exceed the device's opt-in " + std::to_string(smem_limit);
  }
  if (request == KVLoadRequest::tma && !not_tma.empty()) {
    throw Error(ErrorCode::unsupported, "cuda kv_cache: FASTATTN_CUDA_KV_LOAD=tma, but " + not_tma);
  }
  KVLoad load = not_tma.empty() ? KVLoad::tma : KVLoad::cp_async;
  // The ring that fits the device's opt-in shared memory per block (kv_stages_within).
  const int stages = kv_stages_within(tile, d, smem_limit, load);
  if (stages == 0) {
    throw Error(ErrorCode::unsupported, "cuda kv_cache: " + kv_smem_decline_reason(tile, d, smem_limit) +
                                            " (device " + std::to_string(device) + ")");
  }

  KVSplitShape s;
  s.units = p.batch * p.num_kv_heads * row_blocks;
  s.multiprocessors = multiprocessor_count(device);
  // 1 contiguous; paged: 2 where two CTAs fit an SM (kv_cache_heuristics.hpp)
  s.ctas_per_sm =
      kv_split_slots_per_sm(tile, d, stages, kp.is_paged(), shared_memory_per_multiprocessor(device), load);
  // Keys a row block sees at most: the longest cache, or a two-sided window's span.
  std::int64_t keys = max_cache_len > 0 ? std::min(max_cache_len, kp.capacity()) : kp.capacity();
  if (p.window_left >= 0 && p.window_right >= 0) {
    const std::int64_t tokens = std::min<std::int64_t>(p.seqlen_q, tile.rows / group + 2);
    keys = std::min(keys, p.window_left + p.window_right + tokens);
  }
  s.tiles = (std::max<std::int64_t>(keys, 0) + block_n - 1) / block_n;
  s.forced = forced_num_splits();
  const KVSplitChoice split = choose_kv_splits(s);
  if (split.splits > kKVMaxSplits || row_blocks * split.splits > kIntMax) {
    throw Error(ErrorCode::unsupported, "cuda kv_cache: expected row blocks x splits <= 2^31 - 1 and splits <= " +
                                            int_text(kKVMaxSplits) + ", got " + int_text(row_blocks) + " x " +
                                            int_text(split.splits));
  }

  KVCacheLaunch l;
  l.num_splits = split.splits;
  l.rows_per_tile = tile.rows;
  l.block_k = block_n;
  l.stages = stages;
  l.combine = kv_combine_for(split.splits);
  l.scratch_bytes = kv_scratch_bytes(split.splits, p.batch, p.num_kv_heads, rows, p.head_dim, row_blocks);
  if (l.combine == KVCombine::fused) {
    l.counter_offset = kv_counter_offset(split.splits, p.batch, p.num_kv_heads, rows, p.head_dim);
    l.counter_bytes = kv_counter_bytes(p.batch, p.num_kv_heads, row_blocks);
  }
  l.load = load;
  // Programmatic dependent launch (sm90): the CTAs launch while the kernel before them on the
  // stream finishes and wait for it at their first instruction (kv_cache_kernel.cuh), which
  // hides the launch gap in a graph-replayed decode loop: H200, 2026-12-02, b1 decode in graphs
  // of 20 plan runs, 2-7% less time per call (1-3% on another H200; docs/inference-cuda-decode.md
  // "Programmatic dependent launch").
  const bool pdl_asked = kv_pdl_request() && compute_capability(device) >= 90;
  kv_cache_select_kernels(kp, l);
  l.pdl = pdl_asked && sm90_code_runs_on(l.kernels.attention, device);
  if (l.load == KVLoad::tma && !sm90_code_runs_on(l.kernels.attention, device)) {
    not_tma = "this build's KV-cache kernels hold no sm_90 code for the device (FASTATTN_CUDA_ARCHS)";
    if (request == KVLoadRequest::tma) {
      throw Error(ErrorCode::unsupported, "cuda kv_cache: FASTATTN_CUDA_KV_LOAD=tma, but " + not_tma);
    }
    l.load = KVLoad::cp_async;
    kv_cache_select_kernels(kp, l);
  }
  l.kernel = std::string("cuda.kv_cache.sm80.") + to_string(p.dtype) + ".d" + std::to_string(d) +
             (group > 1 ? ".gqa" + int_text(group) : "") + ".rows" + std::to_string(tile.rows) +
             (kp.is_paged() ? ".paged" : "") + (l.load == KVLoad::tma ? ".tma" : "") +
             (split.splits > 1 ? ".split" + std::to_string(split.splits) : "");
  const std::string packing =
      group > 1 ? int_text(group) + " query heads x " + int_text(p.seqlen_q) + " tokens = " + int_text(rows) +
                      " rows per KV head (K/V read once per " + std::to_string(tile.rows) + "-row tile)"
                : int_text(p.seqlen_q) + " tokens = " + int_text(rows) + " rows per head";
  const bool small_pages = kp.is_paged() && kv_pages_shared_by_shuffles(block_n, kp.page_size);
  const std::string loads =
      !kp.is_paged()                 ? std::string("contiguous cache")
      : kp.page_size % block_n == 0  ? "paged, whole-page tiles (one block-table read per " + std::to_string(block_n) +
                                          "-key tile)"
      : small_pages                  ? "paged, page size " + int_text(kp.page_size) + ": " +
                                          int_text(block_n / kp.page_size) + " pages per " + std::to_string(block_n) +
                                          "-key tile, one block-table read per page shared by warp shuffles, "
                                          "16-byte cp.async gathers per row"
                                     : "paged, page size " + int_text(kp.page_size) +
                                          ": per-row block-table reads and 16-byte cp.async gathers";
  l.reason = std::string(p.seqlen_q > kDecodeMaxSeqlenQ ? "chunked prefill on the KV-cache kernel (paged loads in "
                                                          "the kernel, no gather), "
                                                        : "KV-cache decode kernel, ") +
             "4 warps x " + std::to_string(tile.row_warps) + " row warps / " + std::to_string(tile.key_warps) +
             " key warps, " + std::to_string(stages) + "-stage " + kv_load_text(l.load) + " ring of " +
             std::to_string(block_n) + "-key tiles" +
             (l.load == KVLoad::tma ? std::string(" (one thread's box loads of whole 64-column panels, an mbarrier "
                                                  "per stage)")
              : compute_capability(device) / 10 == 9 ? " (not TMA: " + not_tma + ")"
                                                     : std::string()) +
             (stages != kv_stages(d) ? " (the " + std::to_string(kv_stages(d)) + "-stage ring's " +
                                           std::to_string(kv_smem_bytes(tile, d, kv_stages(d))) +
                                           " bytes exceed the device's opt-in " + std::to_string(smem_limit) +
                                           " bytes per block)"
                                     : std::string()) +
             "; GQA packing: " + packing + "; " + loads + "; " + split.reason +
             (split.splits > 1 ? std::string(", ") + kv_combine_text(l.combine) : std::string()) +
             (l.pdl ? "; launched as a programmatic dependent of the kernel before it (sm90)" : "");
  return l;
}

void kv_cache_select_kernels(const KVCacheProblem& kp, KVCacheLaunch& launch) {
  const AttentionProblem& p = kp.attn;
  const int d = static_cast<int>(p.head_dim);
  const bool softcap = p.softcap > 0.0f;
  launch.kernels = p.dtype == DType::bf16
                       ? kernels_for_dtype<__nv_bfloat16>(d, launch.rows_per_tile, launch.stages, softcap, launch.load)
                       : kernels_for_dtype<__half>(d, launch.rows_per_tile, launch.stages, softcap, launch.load);
  const DeviceGuard device_guard(p.device.index);
  check(cudaFuncSetAttribute(launch.kernels.attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             launch.kernels.attention_smem_bytes),
        "cudaFuncSetAttribute", "kv_cache_attention_kernel, " + std::to_string(launch.rows_per_tile) + " rows, " +
                                    std::to_string(launch.stages) + " stages");
  launch.device = p.device.index;
}

void kv_cache_zero_counters(const KVCacheLaunch& launch, void* scratch, int device) {
  if (launch.counter_bytes == 0 || scratch == nullptr) return;
  const DeviceGuard device_guard(device);
  FASTATTN_CUDA_CHECK(cudaMemset(static_cast<unsigned char*>(scratch) + launch.counter_offset, 0, launch.counter_bytes));
}

}  // namespace fastattn::cuda
