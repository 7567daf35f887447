// kv_cache.cu — the CUDA KV-cache attention's run (kv_cache.hpp): KVCacheProblem -> kernel
// parameters, the append kernel, the launches a plan (kv_cache_plan.cu) resolved, and forward()'s
// decode calls as KV-cache calls on their contiguous K/V (kv_cache_forward.hpp). The attention
// kernels are in the generated units (src/cuda/generated/flash_kvc_sm80_*.cu, kv_cache_launch.cuh).
#include "cuda/inference/kv_cache.hpp"

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

#include "cuda/common/alignment.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/cuda_device.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/inference/kv_cache_forward.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda/inference/kv_cache_pages.cuh"
#include "cuda/inference/kv_cache_params.hpp"
#include "cuda/inference/kv_cache_run.hpp"
#include "cuda/inference/kv_cache_tma.hpp"
#include "cuda/sm90/tensor_map.hpp"
#include "common/environment.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// Appends k_new / v_new at seqlens[b] .. seqlens[b] + seqlen_new - 1, as the CPU append does
// (src/cpu/kv_cache.cpp): positions outside [0, capacity), and block-table entries outside
// [0, num_pages) (unallocated pages: a clamped entry would land in another sequence's page), are
// not written. One thread per 16-byte chunk of one (batch, token, KV head)
// row of K and of V; plain loads and stores, any architecture.
__global__ void kv_cache_append_kernel(const KVCacheParams p) {
  const int chunks = p.head_dim / 8;  // 16-bit elements: 8 per chunk
  const std::int64_t total = static_cast<std::int64_t>(p.batch) * p.seqlen_new * p.num_kv_heads * chunks;
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int c = static_cast<int>(idx % chunks);
  std::int64_t rest = idx / chunks;
  const int h = static_cast<int>(rest % p.num_kv_heads);
  rest /= p.num_kv_heads;
  const int t = static_cast<int>(rest % p.seqlen_new);
  const int b = static_cast<int>(rest / p.seqlen_new);
  const std::int64_t pos = kv_append_position(p, b, t);
  if (pos < 0 || pos >= p.capacity) return;
  const int position = static_cast<int>(pos);
  const int page = p.block_table != nullptr ? kv_page_entry(p, b, position / p.page_size) : b;
  if (p.block_table != nullptr && (page < 0 || page >= p.num_pages)) return;
  const int row = p.block_table != nullptr ? position % p.page_size : position;
  using Chunk = uint4;
  const auto* k_src = static_cast<const std::uint16_t*>(p.k_new) + b * p.k_new_batch_stride + t * p.k_new_token_stride +
                      h * p.k_new_head_stride + c * 8;
  const auto* v_src = static_cast<const std::uint16_t*>(p.v_new) + b * p.v_new_batch_stride + t * p.v_new_token_stride +
                      h * p.v_new_head_stride + c * 8;
  auto* k_dst = const_cast<std::uint16_t*>(static_cast<const std::uint16_t*>(p.k)) + page * p.k_page_stride +
                static_cast<std::int64_t>(row) * p.k_token_stride + h * p.k_head_stride + c * 8;
  auto* v_dst = const_cast<std::uint16_t*>(static_cast<const std::uint16_t*>(p.v)) + page * p.v_page_stride +
                static_cast<std::int64_t>(row) * p.v_token_stride + h * p.v_head_stride + c * 8;
  *reinterpret_cast<Chunk*>(k_dst) = *reinterpret_cast<const Chunk*>(k_src);
  *reinterpret_cast<Chunk*>(v_dst) = *reinterpret_cast<const Chunk*>(v_src);
}

// Enqueues the append kernel (p.seqlen_new > 0): run_kv_cache calls it once the attention's
// launch can no longer fail before enqueueing (KVCacheBeforeAttention), so a call that throws
// writes nothing into the cache.
void enqueue_append(const KVCacheParams& p, cudaStream_t stream) {
  if (p.seqlen_new <= 0 || p.batch <= 0 || p.num_kv_heads <= 0) return;
  const std::int64_t chunks = static_cast<std::int64_t>(p.batch) * p.seqlen_new * p.num_kv_heads * (p.head_dim / 8);
  constexpr int kThreads = 256;
  const std::int64_t blocks = (chunks + kThreads - 1) / kThreads;
  kv_cache_append_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) check(status, "kernel launch", "kv_cache_append_kernel");
}

std::string int_text(std::int64_t x) { return std::to_string(x); }

// Strides of size-1 dimensions are never used (token 0, batch 0): left out of the alignment
// check, as frameworks give such dimensions any stride.
TokenStrides used_strides(TokenStrides s, std::int64_t batch, std::int64_t tokens) {
  if (batch <= 1) s.batch = 0;
  if (tokens <= 1) s.token = 0;
  return s;
}

// The cache's rows must start on 16-byte boundaries (cp.async and the append's 16-byte stores).
void check_cache_alignment(const void* data, std::int64_t page_stride, const TokenStrides& s, const char* name) {
  check_row_alignment(data, TokenStrides{page_stride, s.token, s.head}, name);
}

KVCacheParams make_params(const KVCacheProblem& kp) {
  const AttentionProblem& p = kp.attn;
  KVCacheParams f{};
  f.q = p.q.data;
  f.out = p.out.data;
  f.lse = p.lse;
  f.k = p.k.data;
  f.v = p.v.data;
  f.k_new = kp.seqlen_new > 0 ? kp.k_new.data : nullptr;
  f.v_new = kp.seqlen_new > 0 ? kp.v_new.data : nullptr;
  f.q_batch_stride = p.q.stride.batch;
  f.q_token_stride = p.q.stride.token;
  f.q_head_stride = p.q.stride.head;
  f.o_batch_stride = p.out.stride.batch;
  f.o_token_stride = p.out.stride.token;
  f.o_head_stride = p.out.stride.head;
  f.lse_batch_stride = p.lse_batch_stride;
  f.lse_head_stride = p.lse_head_stride;
  f.lse_token_stride = p.lse_token_stride;
  f.k_page_stride = kp.k_page_stride;
  f.k_token_stride = p.k.stride.token;
  f.k_head_stride = p.k.stride.head;
  f.v_page_stride = kp.v_page_stride;
  f.v_token_stride = p.v.stride.token;
  f.v_head_stride = p.v.stride.head;
  f.k_new_batch_stride = kp.k_new.stride.batch;
  f.k_new_token_stride = kp.k_new.stride.token;
  f.k_new_head_stride = kp.k_new.stride.head;
  f.v_new_batch_stride = kp.v_new.stride.batch;
  f.v_new_token_stride = kp.v_new.stride.token;
  f.v_new_head_stride = kp.v_new.stride.head;
  f.block_table = kp.block_table;
  f.block_table_stride = kp.block_table_stride;
  f.seqlens = kp.seqlens;
  f.page_size = static_cast<int>(kp.page_size);
  f.page_shift = -1;
  for (int shift = 0; shift < 31; ++shift) {
    if ((std::int64_t{1} << shift) == kp.page_size) f.page_shift = shift;
  }
  f.num_pages = static_cast<int>(kp.num_pages);
  f.capacity = static_cast<int>(kp.capacity());
  f.seqlen_new = static_cast<int>(kp.seqlen_new);
  f.batch = static_cast<int>(p.batch);
  f.num_heads = static_cast<int>(p.num_heads);
  f.num_kv_heads = static_cast<int>(p.num_kv_heads);
  f.head_dim = static_cast<int>(p.head_dim);
  f.group = static_cast<int>(p.group_size());
  f.seqlen_q = static_cast<int>(p.seqlen_q);
  f.rows = static_cast<int>(p.group_size() * p.seqlen_q);
  constexpr float kLog2e = 1.4426950408889634f;
  f.softcap = p.softcap;
  f.softcap_pre_scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : 0.0f;
  f.scale_log2 = p.softcap > 0.0f ? kLog2e : p.softmax_scale * kLog2e;
  // Windows wider than any cache mean the same as wider-than-int: clamp so positions compare in
  // 32 bits (capacity < 2^31, kv_cache_plan).
  f.window_left = static_cast<int>(std::min(p.window_left, kIntMax));
  f.window_right = static_cast<int>(std::min(p.window_right, kIntMax));
  f.bottom_right = p.alignment == MaskAlignment::bottom_right;
  f.num_splits = 1;
  f.out_f32 = kp.out_f32;
  return f;
}

}  // namespace

void kv_cache_check_limits(const KVCacheProblem& kp) {
  const AttentionProblem& p = kp.attn;
  auto fail = [](const std::string& what, std::int64_t limit, std::int64_t got) {
    throw Error(ErrorCode::unsupported, "cuda kv_cache: expected " + what + " <= " + int_text(limit) + ", got " +
                                            int_text(got));
  };
  if (kp.capacity() > kIntMax) fail("the cache capacity (max_pages_per_seq * page_size)", kIntMax, kp.capacity());
  if (kp.num_pages > kIntMax) fail("num_pages", kIntMax, kp.num_pages);
  if (p.batch > 65535) fail("batch (grid limit)", 65535, p.batch);
  if (p.num_kv_heads > 65535) fail("num_kv_heads (grid limit)", 65535, p.num_kv_heads);
  if (p.seqlen_q * p.group_size() > kIntMax) fail("seqlen_q * (num_heads / num_kv_heads)", kIntMax,
                                                  p.seqlen_q * p.group_size());
  if (kp.seqlen_new > kIntMax) fail("seqlen_new", kIntMax, kp.seqlen_new);
}

namespace {

// A launch's status; the error text (a std::string) is built only on failure, so a run makes no
// allocation.
void check_kv_launch(cudaError_t status, const char* api, const char* kernel) {
  if (status != cudaSuccess) check(status, api, kernel);
}

// The tensor maps of kv_cache_tma.hpp for K and V (bf16 or f16): a cache of pages is a
// TokenTensor of num_pages "batches" of page_size tokens (tensor_map.hpp, which also gives
// dimensions of extent 1 a packed stride).
KVTensorMaps make_kv_tensor_maps(const KVCacheProblem& kp, int box_rows) {
  const AttentionProblem& p = kp.attn;
  auto map_of = [&](const void* data, const TokenStrides& s, std::int64_t page_stride, const char* name) {
    const sm90::TokenTensor t{data, kp.num_pages, kp.page_size, p.num_kv_heads, p.head_dim, page_stride, s.token,
                              s.head};
    return sm90::make_token_tensor_map(t, p.dtype == DType::bf16, box_rows, name, "cuda kv_cache");
  };
  return {map_of(p.k.data, p.k.stride, kp.k_page_stride, "k cache"),
          map_of(p.v.data, p.v.stride, kp.v_page_stride, "v cache")};
}

}  // namespace

// A run: checks of the views against the plan (integer compares; text only on failure), the
// parameters, then the append, the counters' memset (fresh scratch) and the attention (with its
// fused combine, or then the combine kernel), launched from the plan's kernel pointers. No
// allocation, no host synchronisation, no cudaFuncSetAttribute.
void kv_cache_forward(const KVCacheProblem& kp, const KVCacheLaunch& launch, void* scratch, KVScratch state) {
  const AttentionProblem& p = kp.attn;
  kv_cache_check_limits(kp);
  const std::int64_t rows = p.group_size() * p.seqlen_q;
  const KVRowTile tile = kv_row_tile(rows, static_cast<int>(p.head_dim));
  if (launch.rows_per_tile != tile.rows || launch.num_splits < 1 || launch.num_splits > kKVMaxSplits ||
      launch.kernels.attention == nullptr || launch.kernels.softcap != (p.softcap > 0.0f) ||
      launch.device != p.device.index) {
    throw Error(ErrorCode::internal, "cuda kv_cache: the launch (" + std::to_string(launch.rows_per_tile) + " rows, " +
                                         std::to_string(launch.num_splits) + " splits, device " +
                                         std::to_string(launch.device) + ") was planned for another shape or device");
  }
  if (launch.num_splits > 1 && scratch == nullptr) {
    throw Error(ErrorCode::internal, "cuda kv_cache: a split launch needs its scratch");
  }
  if (launch.load == KVLoad::tma && (kp.page_size < 1 || (kp.is_paged() && kp.page_size % launch.block_k != 0))) {
    throw Error(ErrorCode::internal, "cuda kv_cache: TMA loads planned for page size " + int_text(kp.page_size) +
                                         " (they load whole " + std::to_string(launch.block_k) + "-key tiles of one page)");
  }
  const bool fused = launch.num_splits > 1 && launch.combine == KVCombine::fused;
  if (fused && (launch.counter_bytes == 0 || launch.counter_offset + launch.counter_bytes > launch.scratch_bytes)) {
    throw Error(ErrorCode::internal, "cuda kv_cache: the fused combine's counters do not fit the planned scratch");
  }
  check_row_alignment(p.q.data, used_strides(p.q.stride, p.batch, p.seqlen_q), "q");
  check_row_alignment(p.out.data, used_strides(p.out.stride, p.batch, p.seqlen_q), "out");
  check_cache_alignment(p.k.data, kp.num_pages > 1 ? kp.k_page_stride : 0, p.k.stride, "k cache");
  check_cache_alignment(p.v.data, kp.num_pages > 1 ? kp.v_page_stride : 0, p.v.stride, "v cache");
  if (kp.seqlen_new > 0) {
    check_row_alignment(kp.k_new.data, used_strides(kp.k_new.stride, p.batch, kp.seqlen_new), "k_new");
    check_row_alignment(kp.v_new.data, used_strides(kp.v_new.stride, p.batch, kp.seqlen_new), "v_new");
  }
  const DeviceGuard device_guard(p.device.index);
  auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  KVCacheParams f = make_params(kp);
  f.row_blocks = static_cast<int>((rows + tile.rows - 1) / tile.rows);
  f.num_splits = launch.num_splits;
  if (launch.num_splits > 1) {
    f.oaccum = static_cast<float*>(scratch);
    f.lseaccum = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) +
                                          kv_lse_offset(launch.num_splits, p.batch, p.num_kv_heads, rows, p.head_dim));
  }

  // The append's grid size is checked here, before anything is enqueued.
  if (kp.seqlen_new > 0 && p.batch > 0 && p.num_kv_heads > 0) {
    const std::int64_t chunks = p.batch * kp.seqlen_new * p.num_kv_heads * (p.head_dim / 8);
    constexpr int kThreads = 256;
    if ((chunks + kThreads - 1) / kThreads > kIntMax) {
      throw Error(ErrorCode::unsupported, "cuda kv_cache: the append has too many 16-byte chunks (" + int_text(chunks) +
                                              ")");
    }
  }
  if (fused) f.split_counters = reinterpret_cast<int*>(static_cast<unsigned char*>(scratch) + launch.counter_offset);
  // The tensor maps of a TMA launch, encoded on the host for this call's cache pointers (a
  // captured graph keeps them: the cache does not move between replays).
  KVTensorMaps maps{};
  if (launch.load == KVLoad::tma) maps = make_kv_tensor_maps(kp, launch.block_k);
  // The append runs first on the same stream (the attention reads the new tokens after they
  // land); nothing after it can fail before the attention's launch but the memset and the
  // launch themselves.
  enqueue_append(f, stream);
  if (p.batch == 0 || p.seqlen_q == 0 || p.num_heads == 0 || p.num_kv_heads == 0) return;
  if (fused && state == KVScratch::fresh) {
    const cudaError_t status = cudaMemsetAsync(f.split_counters, 0, launch.counter_bytes, stream);
    if (status != cudaSuccess) check(status, "cudaMemsetAsync", "kv_cache split counters");
  }
  void* args[] = {&f, &maps};
  void* combine_args[] = {&f};
  // grid = (row blocks * num_splits, kv_heads, batch): the kernel's tile scheduler.
  const dim3 grid(static_cast<unsigned>(f.row_blocks) * static_cast<unsigned>(f.num_splits),
                  static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.batch));
  if (launch.pdl) {
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = dim3(launch.kernels.attention_threads);
    config.dynamicSmemBytes = static_cast<std::size_t>(launch.kernels.attention_smem_bytes);
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    check_kv_launch(cudaLaunchKernelExC(&config, launch.kernels.attention, args), "cudaLaunchKernelExC",
                    "kv_cache_attention_kernel");
  } else {
    check_kv_launch(cudaLaunchKernel(launch.kernels.attention, grid, dim3(launch.kernels.attention_threads), args,
                                     static_cast<std::size_t>(launch.kernels.attention_smem_bytes), stream),
                    "cudaLaunchKernel", "kv_cache_attention_kernel");
  }
  if (launch.num_splits > 1 && !fused) {
    const int per_cta = launch.kernels.combine_rows_per_cta;
    const dim3 combine_grid(static_cast<unsigned>((f.rows + per_cta - 1) / per_cta),
                            static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.batch));
    check_kv_launch(cudaLaunchKernel(launch.kernels.combine, combine_grid, dim3(launch.kernels.combine_threads),
                                     combine_args, 0, stream),
                    "cudaLaunchKernel", "kv_cache_combine_kernel");
  }
}

KVCacheProblem kv_cache_view_of_forward(const AttentionProblem& p) {
  KVCacheProblem kp;
  kp.attn = p;
  kp.k_page_stride = p.k.stride.batch;
  kp.v_page_stride = p.v.stride.batch;
  kp.page_size = p.seqlen_k;
  kp.num_pages = p.batch;
  kp.block_table = nullptr;
  kp.max_pages_per_seq = 1;
  kp.seqlens = nullptr;  // every sequence holds seqlen_k keys
  kp.seqlen_new = 0;
  return kp;
}

}  // namespace fastattn::cuda
