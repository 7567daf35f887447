// cuda_backward.cu — AttentionProblem -> backward kernel parameters -> the generated launcher.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/alignment.hpp"
#include "cuda/common/cuda_check.hpp"
#include "cuda/common/cuda_device.hpp"
#include "cuda/common/device_scratch.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/flash_bwd/launch.hpp"
#include "cuda/flash_bwd_sm90/launch.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

BackwardParams make_backward_params(const AttentionProblem& p, const BackwardPlan& plan) {
  BackwardParams b{};
  b.q = p.q.data;
  b.k = p.k.data;
  b.v = p.v.data;
  b.out = p.out.data;
  b.dout = p.dout.data;
  b.lse = p.lse;
  b.dq = p.dq.data;
  b.dk = p.dk.data;
  b.dv = p.dv.data;
  auto strides = [](const Operand& o, int64_t& batch, int64_t& token, int64_t& head) {
    batch = o.stride.batch;
    token = o.stride.token;
    head = o.stride.head;
  };
  strides(p.q, b.q_batch_stride, b.q_token_stride, b.q_head_stride);
  strides(p.k, b.k_batch_stride, b.k_token_stride, b.k_head_stride);
  strides(p.v, b.v_batch_stride, b.v_token_stride, b.v_head_stride);
  strides(p.out, b.o_batch_stride, b.o_token_stride, b.o_head_stride);
  strides(p.dout, b.do_batch_stride, b.do_token_stride, b.do_head_stride);
  strides(p.dq, b.dq_batch_stride, b.dq_token_stride, b.dq_head_stride);
  strides(p.dk, b.dk_batch_stride, b.dk_token_stride, b.dk_head_stride);
  strides(p.dv, b.dv_batch_stride, b.dv_token_stride, b.dv_head_stride);
  b.lse_batch_stride = p.lse_batch_stride;
  b.lse_head_stride = p.lse_head_stride;
  b.lse_token_stride = p.lse_token_stride;
  b.cu_seqlens_q = p.cu_seqlens_q;
  b.cu_seqlens_k = p.cu_seqlens_k;
  b.batch = static_cast<int>(p.batch);
  b.num_heads = static_cast<int>(p.num_heads);
  b.num_kv_heads = static_cast<int>(p.num_kv_heads);
  b.group_size = static_cast<int>(p.group_size());
  b.seqlen_q = static_cast<int>(p.seqlen_q);
  b.seqlen_k = static_cast<int>(p.seqlen_k);
  b.total_q = p.is_varlen() ? p.total_q : p.batch * p.seqlen_q;
  b.total_k = p.is_varlen() ? p.total_k : p.batch * p.seqlen_k;
  constexpr float kLog2e = 1.4426950408889634f;
  b.scale = p.softmax_scale;
  b.softcap = p.softcap;
  b.softcap_pre_scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : 0.0f;
  b.scale_log2 = p.softcap > 0.0f ? kLog2e : p.softmax_scale * kLog2e;
  // Windows wider than any sequence mean unbounded-by-length; clamp so positions compare in
  // 32 bits (sequence lengths are < 2^31, validated).
  constexpr std::int64_t kWide = std::int64_t{1} << 31;
  b.window_left = p.window_left > kWide - 1 ? kWide - 1 : p.window_left;
  b.window_right = p.window_right > kWide - 1 ? kWide - 1 : p.window_right;
  b.bottom_right = p.alignment == MaskAlignment::bottom_right;
  b.tile_grid = plan.tile_grid;
  b.tail_tiles = plan.tail.tiles;
  b.tail_pieces = plan.tail.pieces;
  b.main_tiles = plan.tiles - plan.tail.tiles;
  b.grid_n_blocks = static_cast<int>((p.seqlen_k + plan.blocks.block_n - 1) / plan.blocks.block_n);
  b.num_splits = plan.num_splits;
  b.small_blocks = plan.small_blocks;
  b.deterministic = p.deterministic;
  b.sm90_tile_order = plan.sm90_tile_order;
  b.sm90_tile_group = plan.sm90_tile_group;
  b.sm90_dq = plan.sm90_dq;
  return b;
}

template <typename Element>
void backward_for_dtype(const BackwardParams& b, std::int64_t head_dim, cudaStream_t stream) {
  (void)b;  // unused without sm80 units (FASTATTN_CUDA_ARCHS below 80)
  (void)stream;
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_64
    case 64: return run_backward<ForwardPath::sm80, Element, 64>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_96
    case 96: return run_backward<ForwardPath::sm80, Element, 96>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_128
    case 128: return run_backward<ForwardPath::sm80, Element, 128>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM80 && FASTATTN_CUDA_HDIM_256
    case 256: return run_backward<ForwardPath::sm80, Element, 256>(b, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda backward: no launcher for head_dim " + std::to_string(head_dim));
}

// The Turing path's units (FASTATTN_CUDA_LOWRES_PATHS has sm75): f16, head_dim <= 128.
void backward_sm75(const BackwardParams& b, std::int64_t head_dim, cudaStream_t stream) {
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM75 && FASTATTN_CUDA_HDIM_64
    case 64: return run_backward<ForwardPath::sm75, __half, 64>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM75 && FASTATTN_CUDA_HDIM_96
    case 96: return run_backward<ForwardPath::sm75, __half, 96>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM75 && FASTATTN_CUDA_HDIM_128
    case 128: return run_backward<ForwardPath::sm75, __half, 128>(b, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda backward: no sm75 launcher for head_dim " + std::to_string(head_dim));
}

// The Hopper backward's units (FASTATTN_CUDA_ARCHS has 90): head_dim 64, 96, 128 and 256, both
// dtypes (flash_bwd_sm90/plan.hpp: kSm90BackwardHeadDims; the plan checked it).
template <typename Element>
void backward_sm90(const BackwardParams& b, std::int64_t head_dim, cudaStream_t stream) {
  (void)b;
  (void)stream;
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_64
    case 64: return run_backward_sm90<Element, 64>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_96
    case 96: return run_backward_sm90<Element, 96>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_128
    case 128: return run_backward_sm90<Element, 128>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM90 && FASTATTN_CUDA_HDIM_256
    case 256: return run_backward_sm90<Element, 256>(b, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda backward: no sm90 launcher for head_dim " + std::to_string(head_dim));
}

// The Volta path's units (FASTATTN_CUDA_LOWRES_PATHS has sm70): f16, head_dim <= 128.
void backward_sm70(const BackwardParams& b, std::int64_t head_dim, cudaStream_t stream) {
  switch (head_dim) {
#if FASTATTN_CUDA_PATH_SM70 && FASTATTN_CUDA_HDIM_64
    case 64: return run_backward<ForwardPath::sm70, __half, 64>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM70 && FASTATTN_CUDA_HDIM_96
    case 96: return run_backward<ForwardPath::sm70, __half, 96>(b, stream);
#endif
#if FASTATTN_CUDA_PATH_SM70 && FASTATTN_CUDA_HDIM_128
    case 128: return run_backward<ForwardPath::sm70, __half, 128>(b, stream);
#endif
    default: break;
  }
  throw Error(ErrorCode::internal, "cuda backward: no sm70 launcher for head_dim " + std::to_string(head_dim));
}

}  // namespace

bool has_backward_kernel(DType dtype, std::int64_t head_dim) { return has_forward_kernel(dtype, head_dim); }

// On an sm90 device: the sm90 backward or the sm80 one (flash_bwd_sm90/plan.hpp:
// choose_sm90_backward, which holds the reasons).
Sm90BackwardChoice sm90_backward_choice(const AttentionProblem& p) {
  Sm90BackwardShape s;
  s.device_path_sm90 = forward_path(p.device.index) == ForwardPath::sm90;
  if (!s.device_path_sm90) return choose_sm90_backward(s);
  const Sm90BackwardSwitch on = sm90_backward_switch();
  s.opted_in = on.on;
  s.switch_by_env = on.by_env;
  s.head_dim = p.head_dim;
  s.batch = p.batch;
  s.num_heads = p.num_heads;
  s.num_kv_heads = p.num_kv_heads;
  s.seqlen_q = p.seqlen_q;
  s.seqlen_k = p.seqlen_k;
  s.varlen = p.is_varlen();
  s.tma_describes = sm90_backward_tma_describes(p);
  return choose_sm90_backward(s);
}

BackwardPlan backward_plan(const AttentionProblem& p) {
  const Sm90BackwardChoice sm90 = sm90_backward_choice(p);
  if (sm90.sm90) {
    const Sm90MaskShape mask{p.window_left, p.window_right, p.alignment == MaskAlignment::bottom_right, p.seqlen_q,
                             p.seqlen_k};
    return plan_backward_sm90(p.head_dim, p.batch, p.num_heads, p.num_kv_heads, mask, p.deterministic,
                              p.is_varlen() ? p.total_q : -1);
  }
  const std::int64_t total_q = p.is_varlen() ? p.total_q : p.batch * p.seqlen_q;
  const int sms = multiprocessor_count(p.device.index);
  BackwardPlan plan = plan_backward(static_cast<int>(p.head_dim), p.batch, p.num_heads, p.num_kv_heads, p.seqlen_k,
                                    total_q, p.deterministic, p.deterministic ? sms : 0,
                                    shared_memory_per_block(p.device.index), backward_path(p.device.index));
  // Tiles of equal work only (plan.hpp: plan_tile_grid).
  if (!p.is_varlen() && !p.deterministic && p.window_left < 0 && p.window_right < 0) {
    plan_tile_grid(plan, static_cast<int>(p.head_dim), p.batch, p.num_kv_heads, p.group_size(), p.seqlen_q,
                    p.seqlen_k, sms);
  }
  if (forward_path(p.device.index) == ForwardPath::sm90) plan.sm90_declined = sm90.reason;
  return plan;
}

void backward(const AttentionProblem& p, const KernelChoice& choice) {
  (void)choice;
  const std::pair<const Operand*, const char*> operands[] = {
      {&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.out, "out"}, {&p.dout, "dout"},
      {&p.dq, "dq"}, {&p.dk, "dk"}, {&p.dv, "dv"}};
  for (const auto& [operand, name] : operands) check_row_alignment(operand->data, operand->stride, name);
  if (p.batch > 65535 || p.num_kv_heads > 65535) {
    throw Error(ErrorCode::unsupported,
                "cuda backward: expected batch and num_kv_heads <= 65535 (grid limits), got " +
                    std::to_string(p.batch) + " and " + std::to_string(p.num_kv_heads));
  }
  // The caller's current device comes back on every path, also when a check below throws.
  const DeviceGuard device_guard(p.device.index);
  const BackwardPlan plan = backward_plan(p);
  DeviceScratch scratch(p, plan.workspace_bytes);  // checks a caller's Workspace (workspace_check.hpp)
  BackwardParams b = make_backward_params(p, plan);
  b.d_sum = scratch.at<float>(0);
  b.dq_accum = scratch.at<float>(plan.d_sum_bytes);
  b.zero_bytes = plan.workspace_bytes - plan.d_sum_bytes;
  if (plan.sm90_semaphore_bytes > 0) b.dq_semaphores = scratch.at<int>(plan.d_sum_bytes + plan.dq_accum_bytes);
  if (plan.tail.tiles > 0) {
    const std::size_t tail_at = plan.d_sum_bytes + plan.dq_accum_bytes;
    b.dkv_accum = scratch.at<float>(tail_at);
    b.tail_counters = scratch.at<unsigned>(tail_at + plan.tail_partials_bytes);
  }
  auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  if (plan.path == ForwardPath::sm90) {
    if (p.dtype == DType::bf16) {
      backward_sm90<__nv_bfloat16>(b, p.head_dim, stream);
    } else {
      backward_sm90<__half>(b, p.head_dim, stream);
    }
  } else if (plan.path == ForwardPath::sm75) {
    backward_sm75(b, p.head_dim, stream);  // dispatch checked f16, head_dim and the build
  } else if (plan.path == ForwardPath::sm70) {
    backward_sm70(b, p.head_dim, stream);
  } else if (plan.path != ForwardPath::sm80) {
    throw Error(ErrorCode::internal, std::string("cuda backward: no kernel for path ") + to_string(plan.path));
  } else if (p.dtype == DType::bf16) {
    backward_for_dtype<__nv_bfloat16>(b, p.head_dim, stream);
  } else {
    backward_for_dtype<__half>(b, p.head_dim, stream);
  }
}

}  // namespace fastattn::cuda
