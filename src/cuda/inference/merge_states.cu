// merge_states.cu — the CUDA merge_states kernel (fastattn/merge.hpp): memory-bound, one pass.
//
// Block: threads_x x threads_y (merge_states.hpp: plan_merge). threadIdx.y picks one
// (batch, token, head) row; the row's threads_x threads step over its head_dim in chunks of
// VecElems elements (16 bytes, or 1), read out_a and out_b chunks, weight them in fp32
// (merge_problem.hpp: merge_weights, shared with the CPU) and store the rounded chunk.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/inference/merge_states.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {
namespace {

// Storage <-> float per dtype.
struct F32 {
  using Storage = float;
  static __device__ float load(float x) { return x; }
  static __device__ float store(float x) { return x; }
};
struct F16 {
  using Storage = __half;
  static __device__ float load(__half x) { return __half2float(x); }
  static __device__ __half store(float x) { return __float2half_rn(x); }
};
struct Bf16 {
  using Storage = __nv_bfloat16;
  static __device__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __nv_bfloat16 store(float x) { return __float2bfloat16_rn(x); }
};

// VecElems elements moved as one 16-byte access (or one element).
template <typename Storage, int VecElems>
struct alignas(sizeof(Storage) * VecElems) Chunk {
  Storage x[VecElems];
};

struct MergeArgs {
  const void* out_a;
  const void* out_b;
  void* out;
  TokenStrides out_a_stride, out_b_stride, out_stride;
  LseOperand lse_a, lse_b, lse;  // lse.data null: not written
  std::int64_t rows, num_heads, seqlen_q, head_dim;
};

__device__ __forceinline__ std::int64_t offset(const TokenStrides& s, std::int64_t b, std::int64_t t, std::int64_t h) {
  return b * s.batch + t * s.token + h * s.head;
}
__device__ __forceinline__ std::int64_t offset(const LseStrides& s, std::int64_t b, std::int64_t t, std::int64_t h) {
  return b * s.batch + t * s.token + h * s.head;
}

template <typename Elem, int VecElems>
__global__ void merge_states_kernel(MergeArgs args) {
  using Storage = typename Elem::Storage;
  using Vec = Chunk<Storage, VecElems>;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < args.rows;
  std::int64_t b = 0, t = 0, h = 0;
  MergeWeights<float> w{0.0f, 0.0f, 0.0f};
  if (active) {
    h = row % args.num_heads;
    t = (row / args.num_heads) % args.seqlen_q;
    b = row / args.num_heads / args.seqlen_q;
    w = merge_weights(args.lse_a.data[offset(args.lse_a.stride, b, t, h)],
                      args.lse_b.data[offset(args.lse_b.stride, b, t, h)]);
    const Vec* a = reinterpret_cast<const Vec*>(static_cast<const Storage*>(args.out_a) + offset(args.out_a_stride, b, t, h));
    const Vec* bv = reinterpret_cast<const Vec*>(static_cast<const Storage*>(args.out_b) + offset(args.out_b_stride, b, t, h));
    Vec* o = reinterpret_cast<Vec*>(static_cast<Storage*>(args.out) + offset(args.out_stride, b, t, h));
    const std::int64_t chunks = args.head_dim / VecElems;
    for (std::int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      // Zero weight: that side has no keys (or underflowed); its memory is not read.
      Vec va{}, vb{}, result;
      if (w.weight_a != 0.0f) va = a[c];
      if (w.weight_b != 0.0f) vb = bv[c];
#pragma unroll
      for (int i = 0; i < VecElems; ++i) {
        result.x[i] = Elem::store(weighted(w.weight_a, Elem::load(va.x[i])) + weighted(w.weight_b, Elem::load(vb.x[i])));
      }
      o[c] = result;  // the same thread read this chunk of out_a / out_b: in-place is safe
    }
  }
  if (args.lse.data == nullptr) return;  // uniform over the grid: no thread waits below
  // lse may be lse_a or lse_b (in place): every thread of the row has read them before one
  // thread overwrites the row's value.
  __syncthreads();
  if (active && threadIdx.x == 0) args.lse.data[offset(args.lse.stride, b, t, h)] = w.lse;
}

template <typename Elem>
void launch_for_dtype(const MergeArgs& args, const MergeLaunch& l, cudaStream_t stream) {
  const dim3 block(static_cast<unsigned>(l.threads_x), static_cast<unsigned>(l.threads_y));
  const dim3 grid(static_cast<unsigned>(l.blocks));
  constexpr int kVec = 16 / static_cast<int>(sizeof(typename Elem::Storage));
  if (l.vector_elems == kVec) {
    merge_states_kernel<Elem, kVec><<<grid, block, 0, stream>>>(args);
  } else if (l.vector_elems == 1) {
    merge_states_kernel<Elem, 1><<<grid, block, 0, stream>>>(args);
  } else {
    throw Error(ErrorCode::internal, "cuda merge_states: no kernel for " + std::to_string(l.vector_elems) + "-element vectors");
  }
}

// Makes p's device current for the scope and restores the caller's afterwards, also on a throw.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FASTATTN_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FASTATTN_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }  // best effort: a destructor must not throw
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

void merge_states(const MergeProblem& p, const MergeLaunch& launch) {
  if (launch.blocks > std::numeric_limits<std::int32_t>::max()) {
    throw Error(ErrorCode::unsupported, "cuda merge_states: expected at most 2^31 - 1 blocks of " +
                                            std::to_string(launch.threads_y) + " rows, got " + std::to_string(launch.blocks));
  }
  DeviceGuard guard(p.device.index);
  MergeArgs args{p.out_a.data, p.out_b.data, p.out.data, p.out_a.stride, p.out_b.stride, p.out.stride,
                 p.lse_a,      p.lse_b,      p.lse,      p.rows(),       p.num_heads,    p.seqlen_q,
                 p.head_dim};
  auto stream = static_cast<cudaStream_t>(p.cuda_stream);
  switch (p.dtype) {
    case DType::f32: launch_for_dtype<F32>(args, launch, stream); break;
    case DType::f16: launch_for_dtype<F16>(args, launch, stream); break;
    case DType::bf16: launch_for_dtype<Bf16>(args, launch, stream); break;
    default: throw Error(ErrorCode::internal, std::string("cuda merge_states: unvalidated dtype ") + to_string(p.dtype));
  }
  check_launch(std::string("merge_states_kernel<") + to_string(p.dtype) + ", " + std::to_string(launch.vector_elems) + ">");
}

}  // namespace fastattn::cuda
