// cuda_backend.cu — AttentionProblem -> kernel parameters -> the generated launcher.
#include "cuda/cuda_backend.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/common/alignment.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/cuda_device.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/flash_fwd/launch.hpp"
#include "cuda/flash_fwd/query_groups.hpp"
#include "cuda/flash_fwd/split_layout.hpp"
#include "cuda/flash_fwd_sm90/launch.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/inference/kv_cache.hpp"
#include "cuda/inference/kv_cache_forward.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

ForwardParams make_forward_params(const AttentionProblem& p) {
  ForwardParams f{};
  f.q = p.q.data;
  f.k = p.k.data;
  f.v = p.v.data;
  f.out = p.out.data;
  f.lse = p.lse;
  f.q_batch_stride = p.q.stride.batch;
  f.q_token_stride = p.q.stride.token;
  f.q_head_stride = p.q.stride.head;
  f.k_batch_stride = p.k.stride.batch;
  f.k_token_stride = p.k.stride.token;
  f.k_head_stride = p.k.stride.head;
  f.v_batch_stride = p.v.stride.batch;
  f.v_token_stride = p.v.stride.token;
  f.v_head_stride = p.v.stride.head;
  f.o_batch_stride = p.out.stride.batch;
  f.o_token_stride = p.out.stride.token;
  f.o_head_stride = p.out.stride.head;
  f.lse_batch_stride = p.lse_batch_stride;
  f.lse_head_stride = p.lse_head_stride;
  f.lse_token_stride = p.lse_token_stride;
  f.cu_seqlens_q = p.cu_seqlens_q;
  f.cu_seqlens_k = p.cu_seqlens_k;
  f.batch = static_cast<int>(p.batch);
  f.num_heads = static_cast<int>(p.num_heads);
  f.group_size = static_cast<int>(p.group_size());
  f.seqlen_q = static_cast<int>(p.seqlen_q);
  f.seqlen_k = static_cast<int>(p.seqlen_k);
  constexpr float kLog2e = 1.4426950408889634f;
  f.softcap = p.softcap;
  f.softcap_pre_scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : 0.0f;
  f.scale_log2 = p.softcap > 0.0f ? kLog2e : p.softmax_scale * kLog2e;
  // Windows wider than any sequence mean the same as unbounded-by-length; clamp so the kernel
  // can compare positions in 32 bits (sequence lengths are < 2^31, validated).
  constexpr std::int64_t kWide = std::int64_t{1} << 31;
  f.window_left = p.window_left > kWide - 1 ? kWide - 1 : p.window_left;
  f.window_right = p.window_right > kWide - 1 ? kWide - 1 : p.window_right;
  f.bottom_right = p.alignment == MaskAlignment::bottom_right;
  f.short_query = false;
  f.num_splits = 1;
  f.total_q = p.total_q;
  f.total_k = p.total_k;
  f.oaccum = nullptr;
  f.lseaccum = nullptr;
  return f;
}

// SM count and shared memory per SM of a device, read once (cudaDeviceGetAttribute, not the
// slower cudaGetDeviceProperties) and cached: the dispatcher asks on every call.
struct DeviceShape {
  int multiprocessors = 0;
  int smem_per_multiprocessor = 0;
  int smem_per_block_optin = 0;
  int compute_capability = 0;  // major * 10 + minor
  // Peak DRAM bandwidth over the SMs, GB/s: two transfers a memory clock (HBM's double data
  // rate, as cudaDeviceProp's bandwidth is usually computed) on the whole bus. 0 when the
  // device reports no clock or width.
  double dram_gbs_per_multiprocessor = 0.0;
};
DeviceShape device_shape(int device) {
  constexpr int kMaxDevices = 64;
  static std::mutex mutex;
  static DeviceShape cache[kMaxDevices];
  std::lock_guard<std::mutex> lock(mutex);
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached && cache[device].multiprocessors > 0) return cache[device];
  DeviceShape shape;
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&shape.multiprocessors, cudaDevAttrMultiProcessorCount, device));
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&shape.smem_per_multiprocessor,
                                             cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&shape.smem_per_block_optin,
                                             cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  int major = 0, minor = 0;
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  shape.compute_capability = major * 10 + minor;
  int memory_khz = 0, bus_bits = 0;
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, device));
  FASTATTN_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  if (memory_khz > 0 && bus_bits > 0 && shape.multiprocessors > 0) {
    const double gbs = 2.0 * memory_khz * 1e3 * (bus_bits / 8.0) / 1e9;
    shape.dram_gbs_per_multiprocessor = gbs / shape.multiprocessors;
  }
  if (cached) cache[device] = shape;
  return shape;
}

template <typename Element>
void forward_for_dtype(const ForwardParams& f, std::int64_t head_dim, cudaStream_t stream) {
  (void)f;  // unused without sm80 units (FASTATTN_CUDA_ARCHS below 80)
  (void)stream;
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_64
    case 64: return run_forward<ForwardPath::sm80, Element, 64>(f, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_96
    case 96: return run_forward<ForwardPath::sm80, Element, 96>(f, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_128
    case 128: return run_forward<ForwardPath::sm80, Element, 128>(f, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_256
    case 256: return run_forward<ForwardPath::sm80, Element, 256>(f, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda forward: no launcher for head_dim " + std::to_string(head_dim));
}

// The Volta / Turing paths: f16 units only, compiled when FASTATTN_CUDA_LOWRES_PATHS names the
// path (FASTATTN_CUDA_PATH_SM75 / _SM70); sm70 has no d = 256 unit (forward_path.hpp).
void forward_lowres(ForwardPath path, const ForwardParams& f, std::int64_t head_dim, cudaStream_t stream) {
  (void)f;
  (void)stream;
#if FASTATTN_CUDA_PATH_SM75
  if (path == ForwardPath::sm75) {
    switch (head_dim) {
#if FASTATTN_CUDA_HDIM_64
      case 64: return run_forward<ForwardPath::sm75, __half, 64>(f, stream);
#endif
#if FASTATTN_CUDA_HDIM_96
      case 96: return run_forward<ForwardPath::sm75, __half, 96>(f, stream);
#endif
#if FASTATTN_CUDA_HDIM_128
      case 128: return run_forward<ForwardPath::sm75, __half, 128>(f, stream);
#endif
#if FASTATTN_CUDA_HDIM_256
      case 256: return run_forward<ForwardPath::sm75, __half, 256>(f, stream);
#endif
      default: break;
    }
  }
#endif
#if FASTATTN_CUDA_PATH_SM70
  if (path == ForwardPath::sm70) {
    switch (head_dim) {
#if FASTATTN_CUDA_HDIM_64
      case 64: return run_forward<ForwardPath::sm70, __half, 64>(f, stream);
#endif
#if FASTATTN_CUDA_HDIM_96
      case 96: return run_forward<ForwardPath::sm70, __half, 96>(f, stream);
#endif
#if FASTATTN_CUDA_HDIM_128
      case 128: return run_forward<ForwardPath::sm70, __half, 128>(f, stream);
#endif
      default: break;
    }
  }
#endif
  throw Error(ErrorCode::internal, std::string("cuda forward: no ") + to_string(path) + " launcher for head_dim " +
                                       std::to_string(head_dim));
}

// The Hopper kernels (flash_fwd_sm90/), compiled when FASTATTN_CUDA_ARCHS has 90: head dims 64,
// 96, 128 and 256 (flash_fwd_sm90/plan.hpp: sm90_has_head_dim; the plan sends others to sm80).
template <typename Element>
void forward_sm90(const ForwardParams& f, const Sm90LaunchChoice& choice, std::int64_t head_dim,
                  cudaStream_t stream) {
  (void)f;
  (void)choice;
  (void)stream;
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_64
    case 64: return run_forward_sm90<Element, 64>(f, choice, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_96
    case 96: return run_forward_sm90<Element, 96>(f, choice, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_128
    case 128: return run_forward_sm90<Element, 128>(f, choice, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_256
    case 256: return run_forward_sm90<Element, 256>(f, choice, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda forward: no sm90 launcher for head_dim " + std::to_string(head_dim));
}

}  // namespace

int multiprocessor_count(int device) { return device_shape(device).multiprocessors; }
int shared_memory_per_block(int device) { return device_shape(device).smem_per_block_optin; }
int compute_capability(int device) { return device_shape(device).compute_capability; }
int shared_memory_per_multiprocessor(int device) { return device_shape(device).smem_per_multiprocessor; }

std::vector<int> compiled_head_dims() {
  std::vector<int> dims;
#if FASTATTN_CUDA_HDIM_64
  dims.push_back(64);
#endif
#if FASTATTN_CUDA_HDIM_96
  dims.push_back(96);
#endif
#if FASTATTN_CUDA_HDIM_128
  dims.push_back(128);
#endif
#if FASTATTN_CUDA_HDIM_256
  dims.push_back(256);
#endif
  return dims;
}

std::vector<std::string> compiled_archs() {
  std::vector<std::string> archs;
  const std::string list = FASTATTN_CUDA_ARCH_LIST;  // "80;90", from CMake
  std::size_t start = 0;
  while (start < list.size()) {
    std::size_t end = list.find(';', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) archs.push_back("sm" + list.substr(start, end - start));
    start = end + 1;
  }
  return archs;
}

bool path_compiled(ForwardPath path) {
  switch (path) {
    case ForwardPath::sm75: return FASTATTN_CUDA_PATH_SM75 != 0;
    case ForwardPath::sm70: return FASTATTN_CUDA_PATH_SM70 != 0;
    case ForwardPath::sm90: return FASTATTN_CUDA_PATH_SM90 != 0;
    default: return FASTATTN_CUDA_PATH_SM80 != 0;
  }
}

std::string path_archs(ForwardPath path) {
  switch (path) {
    case ForwardPath::sm75: return FASTATTN_CUDA_ARCHS_SM75;
    case ForwardPath::sm70: return FASTATTN_CUDA_ARCHS_SM70;
    case ForwardPath::sm90: return FASTATTN_CUDA_ARCHS_SM90;
    default: return FASTATTN_CUDA_ARCHS_SM80;
  }
}

bool path_runs_on(ForwardPath path, int device) {
  // Decided once per (path, device) and cached: the dispatcher asks on every call.
  constexpr int kMaxDevices = 64;
  static std::atomic<signed char> cache[4][kMaxDevices] = {};  // 0 unknown, 1 runs, -1 does not
  const int index = static_cast<int>(path);
  const bool cached = device >= 0 && device < kMaxDevices;
  if (cached) {
    const signed char known = cache[index][device].load(std::memory_order_relaxed);
    if (known != 0) return known > 0;
  }
  const bool runs = archs_run_on(path_archs(path), compute_capability(device));
  if (cached) cache[index][device].store(runs ? 1 : -1, std::memory_order_relaxed);
  return runs;
}

// Whether this build's sm90 units run on the device (sm_90a: compute capability 9.0 alone).
bool sm90_runs_on(int device) { return path_compiled(ForwardPath::sm90) && path_runs_on(ForwardPath::sm90, device); }

ForwardPath forward_path(int device) {
  return select_forward_path(device_shape(device).compute_capability, forward_path_request(), sm90_runs_on(device));
}

ForwardPath backward_path(int device) { return backward_path_for(forward_path(device)); }

bool has_forward_kernel(DType dtype, std::int64_t head_dim) {
  if (dtype != DType::f16 && dtype != DType::bf16) return false;
  for (int d : compiled_head_dims()) {
    if (d == head_dim) return true;
  }
  return false;
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    out.push_back({i, prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount,
                   prop.totalGlobalMem});
  }
  return out;
}

namespace {
// Why the KV-cache kernel cannot run forward()'s call on its device (no ring of its row tile
// fits the opt-in shared memory per block); empty when it can.
std::string kv_cache_forward_decline(const AttentionProblem& call) {
  const std::int64_t group = call.num_kv_heads > 0 ? call.group_size() : 1;
  const int d = static_cast<int>(call.head_dim);
  return kv_smem_decline_reason(kv_row_tile(group * call.seqlen_q, d), d, shared_memory_per_block(call.device.index));
}
}  // namespace

// The route and the plan come from plan_forward (flash_fwd/heuristics.hpp); a KV-cache route's
// launch (kernels, splits, scratch) is filled here from the call: short padded queries take
// their K/V as a contiguous cache (kv_cache_forward.hpp).
ForwardPlan forward_plan(const AttentionProblem& call) {
  // GQA decode on the flash kernels runs as the packed problem (flash_fwd/query_groups.hpp).
  const AttentionProblem p = with_packed_query_groups(call);
  const DeviceShape device = device_shape(p.device.index);
  ForwardShape s;
  s.batch = p.batch;
  s.num_heads = p.num_heads;
  s.head_dim = p.head_dim;
  s.seqlen_q = p.seqlen_q;
  s.seqlen_k = p.seqlen_k;
  s.total_q = p.total_q;
  s.total_k = p.total_k;
  s.window_left = p.window_left;
  s.window_right = p.window_right;
  s.multiprocessors = device.multiprocessors;
  s.smem_per_multiprocessor = device.smem_per_multiprocessor;
  s.dram_gbs_per_multiprocessor = device.dram_gbs_per_multiprocessor;
  const ForwardPathRequest request = forward_path_request();
  s.path = select_forward_path(device.compute_capability, request, sm90_runs_on(p.device.index));
  s.path_forced = !request.automatic;
  s.query_group = packed_query_group(call);
  s.heads_per_kv_head = p.num_kv_heads > 0 ? p.group_size() : 1;
  s.varlen = p.is_varlen();
  s.softcap = p.softcap > 0.0f;
  s.tma_describes = sm90_tma_describes(p);
  s.out_tma_describes = !p.is_varlen() && sm90_tma_describes(p.out, p.batch, p.seqlen_q, p.num_heads);
  s.query_tokens = call.seqlen_q;
  if (forward_uses_kv_cache_kernel(s.path, s.varlen, s.query_tokens)) s.kv_cache_unfit = kv_cache_forward_decline(call);
  ForwardPlan plan = cuda::plan_forward(s);
  if (plan.kernel == ForwardKernel::kv_cache) {
    plan.kv_cache = kv_cache_plan(kv_cache_view_of_forward(call), call.seqlen_k);
    plan.query_group = call.num_kv_heads > 0 ? call.group_size() : 1;
    plan.blocks = {plan.kv_cache.rows_per_tile, plan.kv_cache.block_k, 128};
    plan.num_splits = plan.kv_cache.num_splits;
    plan.forced = forced_num_splits() > 0;
    plan.workspace_bytes = plan.kv_cache.scratch_bytes;
  }
  return plan;
}

void forward(const AttentionProblem& call, const ForwardPlan& plan) {
  if (plan.kernel == ForwardKernel::kv_cache) {  // short padded queries (forward_plan)
    const KVCacheProblem kp = kv_cache_view_of_forward(call);
    const DeviceGuard device_guard(call.device.index);
    DeviceScratch scratch(call, plan.kv_cache.scratch_bytes);  // checks a caller's Workspace
    kv_cache_forward(kp, plan.kv_cache, scratch.data());
    return;
  }
  // GQA decode runs as the packed problem (flash_fwd/query_groups.hpp), as forward_plan says.
  const AttentionProblem p = with_packed_query_groups(call);
  check_row_alignment(p.q.data, p.q.stride, "q");
  check_row_alignment(p.k.data, p.k.stride, "k");
  check_row_alignment(p.v.data, p.v.stride, "v");
  check_row_alignment(p.out.data, p.out.stride, "out");
  if (p.batch > 65535 || p.num_heads > 65535) {
    throw Error(ErrorCode::unsupported, "cuda forward: expected batch and num_heads <= 65535 (grid limits), got " +
                                            std::to_string(p.batch) + " and " + std::to_string(p.num_heads));
  }
  // The caller's current device comes back on every path, also when a check below throws.
  const DeviceGuard device_guard(p.device.index);
  ForwardParams f = make_forward_params(p);
  auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  f.short_query = plan.short_query;
  f.num_splits = plan.num_splits;
  DeviceScratch scratch(p, plan.workspace_bytes);  // checks a caller's Workspace (workspace_check.hpp)
  if (plan.num_splits > 1) {
    f.oaccum = scratch.at<float>(0);
    f.lseaccum = scratch.at<float>(split_lse_offset(plan.num_splits, p.num_heads, p.total_q, p.head_dim));
  }
  if (plan.path == ForwardPath::sm90) {
    Sm90LaunchChoice sm90;
    sm90.overlap = plan.sm90_overlap;
    sm90.wg_order = plan.sm90_wg_order;
    sm90.block_n = plan.blocks.block_n == kSm90WideBlockN ? kSm90WideBlockN : 0;
    sm90.block_m = plan.sm90_block_m;
    sm90.scheduler = plan.sm90_scheduler;
    sm90.sections = plan.sm90_sections;
    sm90.tma_store = plan.sm90_tma_store;
    sm90.cta_slots = plan.multiprocessors * plan.ctas_per_sm;
    sm90.cluster = plan.sm90_cluster;
    if (plan.sm90_scheduler == Sm90Scheduler::dynamic) sm90.tile_counter = scratch.data();  // plan.hpp
    if (p.dtype == DType::bf16) {
      forward_sm90<__nv_bfloat16>(f, sm90, p.head_dim, stream);
    } else {
      forward_sm90<__half>(f, sm90, p.head_dim, stream);
    }
  } else if (plan.path != ForwardPath::sm80) {
    forward_lowres(plan.path, f, p.head_dim, stream);  // f16 only: the dispatcher checked
  } else if (p.dtype == DType::bf16) {
    forward_for_dtype<__nv_bfloat16>(f, p.head_dim, stream);
  } else {
    forward_for_dtype<__half>(f, p.head_dim, stream);
  }
}

}  // namespace fastattn::cuda
