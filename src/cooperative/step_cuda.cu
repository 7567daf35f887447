// step_cuda.cu — the cooperative step on a GPU (fastattn/cooperative.hpp). Three parts at once:
//   part 1  the KV-cache kernel over the device pages, on the caller's stream S;
//   part 2  host pages copied chunk by chunk on a copy stream C into two staging buffers, each
//           chunk attended on S as a contiguous cache as soon as its copy lands (event), the copy
//           of chunk i + 1 running while chunk i is attended; a buffer is refilled only after
//           the attention that read it (event);
//   part 3  the CPU kernels over the CPU's host pages, on a host thread.
// Each partial (out, lse) is accumulated on S into an f32 accumulator (merge_states' formula;
// kernels below), rounded once into out at the end. Returns after S is synchronised.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "cooperative/cooperative_internal.hpp"
#include "fastattn/attention.hpp"
#include "fastattn/kv_cache.hpp"

namespace fastattn::coop {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw Error(e == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::device_error,
                std::string("cooperative step: ") + what + ": " + cudaGetErrorString(e));
  }
}

template <class T> __device__ float to_f32(T x);
template <> __device__ float to_f32<float>(float x) { return x; }
template <> __device__ float to_f32<__half>(__half x) { return __half2float(x); }
template <> __device__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T> __device__ T from_f32(float x);
template <> __device__ float from_f32<float>(float x) { return x; }
template <> __device__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// One block per (token, head) row; acc [rows, d], part [rows, d] dense; lse [heads, seqlen_q].
template <class T>
__global__ void accumulate_kernel(float* acc, float* acc_lse, const T* part, const float* part_lse, int seqlen_q,
                                  int num_heads, int head_dim) {
  const int row = blockIdx.x;
  const int t = row / num_heads, h = row % num_heads;
  const int lrow = h * seqlen_q + t;
  const float la = acc_lse[lrow], lb = part_lse[lrow];
  float* a = acc + static_cast<long long>(row) * head_dim;
  const T* b = part + static_cast<long long>(row) * head_dim;
  __syncthreads();  // every thread read acc_lse before thread 0 writes it
  if (isnan(la) || isnan(lb) || la == INFINITY || lb == INFINITY) {
    for (int e = threadIdx.x; e < head_dim; e += blockDim.x) a[e] = NAN;
    if (threadIdx.x == 0) acc_lse[lrow] = NAN;
    return;
  }
  if (lb == -INFINITY) return;
  const float m = fmaxf(la, lb);
  const float merged = m + logf(expf(la - m) + expf(lb - m));
  const float wa = la == -INFINITY ? 0.0f : expf(la - merged);
  const float wb = expf(lb - merged);
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    a[e] = (la == -INFINITY ? 0.0f : a[e] * wa) + to_f32(b[e]) * wb;
  }
  if (threadIdx.x == 0) acc_lse[lrow] = merged;
}

template <class T>
__global__ void finish_kernel(const float* acc, const float* acc_lse, T* out, long long stride_t, long long stride_h,
                              float* lse, long long lse_stride_h, long long lse_stride_t, int seqlen_q, int num_heads,
                              int head_dim) {
  const int row = blockIdx.x;
  const int t = row / num_heads, h = row % num_heads;
  const float l = acc_lse[h * seqlen_q + t];
  for (int e = threadIdx.x; e < head_dim; e += blockDim.x) {
    out[t * stride_t + h * stride_h + e] = from_f32<T>(l == -INFINITY ? 0.0f : acc[static_cast<long long>(row) * head_dim + e]);
  }
  if (lse != nullptr && threadIdx.x == 0) lse[h * lse_stride_h + t * lse_stride_t] = l;
}

__global__ void fill_kernel(float* p, int n, float value) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

// Device memory of one step, freed on every exit.
struct DeviceBlock {
  void* p = nullptr;
  explicit DeviceBlock(std::size_t bytes) { check(cudaMalloc(&p, bytes > 0 ? bytes : 1), "cudaMalloc of the step's scratch"); }
  ~DeviceBlock() { (void)cudaFree(p); }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
};

struct Events {
  cudaEvent_t e[6] = {};  // copied[2], computed[2], spare
  Events() {
    for (auto& x : e) check(cudaEventCreateWithFlags(&x, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Events() {
    for (auto& x : e) (void)cudaEventDestroy(x);
  }
};

struct CopyStream {
  cudaStream_t s = nullptr;
  CopyStream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate (copy stream)"); }
  ~CopyStream() { (void)cudaStreamDestroy(s); }
};

void launch_accumulate(DType dtype, float* acc, float* acc_lse, const void* part, const float* part_lse, int sq, int heads,
                       int d, cudaStream_t s) {
  const int rows = sq * heads;
  const int threads = d < 128 ? d : 128;
  switch (dtype) {
    case DType::bf16:
      accumulate_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<const __nv_bfloat16*>(part), part_lse, sq, heads, d);
      break;
    case DType::f16:
      accumulate_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<const __half*>(part), part_lse, sq, heads, d);
      break;
    default:
      accumulate_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<const float*>(part), part_lse, sq, heads, d);
      break;
  }
  check(cudaGetLastError(), "accumulate kernel launch");
}

}  // namespace

void run_step_cuda(const StepPlan& plan, const TensorView& q, const CooperativeKVCache& cache, const TensorView& out,
                   const TensorView* lse, const CooperativeNewKV* new_kv, const CooperativeOptions& options) {
  const auto& c = cache.config();
  check(cudaSetDevice(c.device.index), "cudaSetDevice");
  auto S = static_cast<cudaStream_t>(options.attention.cuda_stream);
  const int sq = static_cast<int>(plan.seqlen_q), heads = static_cast<int>(plan.num_heads), d = static_cast<int>(plan.head_dim);
  const std::int64_t rows = plan.seqlen_q * plan.num_heads;
  const std::size_t esize = dtype_size(c.dtype);
  // Partials are f32 where the part's kernel writes f32 (PartialRunner::out_dtype): room for f32.
  const std::size_t out_bytes = static_cast<std::size_t>(rows * d) * sizeof(float);
  const std::size_t lse_bytes = static_cast<std::size_t>(rows) * sizeof(float);
  const std::size_t n_dev = plan.device.local.size();
  const std::size_t n_chunks = plan.chunks.size();
  // Scratch: acc f32, acc_lse, 2 partial outs + lses (device part / chunks and new tokens; the
  // CPU's), the block table of the device part, the lengths (device part, then each chunk).
  const std::size_t acc_bytes = static_cast<std::size_t>(rows * d) * sizeof(float);
  DeviceBlock scratch(acc_bytes + lse_bytes + 3 * (out_bytes + lse_bytes) + static_cast<std::size_t>(cache.device_pages()) * 4 +
                      (1 + n_chunks) * 4 + 256 * 8);
  char* at = static_cast<char*>(scratch.p);
  auto carve = [&](std::size_t bytes) { char* p = at; at += (bytes + 255) / 256 * 256; return p; };
  auto* acc = reinterpret_cast<float*>(carve(acc_bytes));
  auto* acc_lse = reinterpret_cast<float*>(carve(lse_bytes));
  void* part_out[3];
  float* part_lse[3];
  for (int i = 0; i < 3; ++i) {
    part_out[i] = carve(out_bytes);
    part_lse[i] = reinterpret_cast<float*>(carve(lse_bytes));
  }
  auto* table = reinterpret_cast<std::int32_t*>(carve(static_cast<std::size_t>(cache.device_pages()) * 4));
  auto* lengths = reinterpret_cast<std::int32_t*>(carve((1 + n_chunks) * 4));
  std::vector<std::int32_t> host_lengths(1 + n_chunks);
  host_lengths[0] = static_cast<std::int32_t>(plan.device.tokens);
  for (std::size_t i = 0; i < n_chunks; ++i) host_lengths[1 + i] = static_cast<std::int32_t>(plan.chunks[i].total);
  check(cudaMemcpy(lengths, host_lengths.data(), host_lengths.size() * 4, cudaMemcpyHostToDevice), "lengths upload");
  if (n_dev > 0) check(cudaMemcpy(table, plan.device.local.data(), n_dev * 4, cudaMemcpyHostToDevice), "block table upload");

  const AttentionOptions a = part_options(options, Backend::cuda);
  // The parts' plans and scratch (allocated here, before anything is enqueued).
  const bool do_dev = plan.run_device && n_dev > 0;
  const bool do_stream = plan.run_streamed && n_chunks > 0;
  const bool do_cpu = plan.run_cpu && !plan.cpu.local.empty();
  const KVCache dev_cache = paged_part_view(cache, PageTier::device, table, lengths, c.device);
  PartialRunner dev_part, stage_part, cpu_part;
  if (do_dev) dev_part = plan_part(q, dev_cache, a);
  if (do_stream) stage_part = plan_part(q, staged_part_view(cache, 0, lengths + 1), a);
  std::vector<std::int32_t> cpu_table(static_cast<std::size_t>(cache.host_pages()), 0);
  std::int32_t cpu_seqlen = static_cast<std::int32_t>(plan.cpu.tokens);
  std::copy(plan.cpu.local.begin(), plan.cpu.local.end(), cpu_table.begin());
  const KVCache cpu_cache = paged_part_view(cache, PageTier::host, cpu_table.data(), &cpu_seqlen, Device::cpu());
  const TensorView q_host_view = make_tensor(nullptr, c.dtype, {1, plan.seqlen_q, plan.num_heads, plan.head_dim});

  // Part 3 first: the CPU starts at once, on q copied to the host.
  std::vector<unsigned char> q_host(static_cast<std::size_t>(rows * d) * esize);
  std::vector<float> cpu_out(static_cast<std::size_t>(rows * d));
  std::vector<float> cpu_lse(static_cast<std::size_t>(rows));
  std::exception_ptr cpu_error;
  std::thread cpu_thread;
  if (do_cpu) {
    TensorView qh = q_host_view;
    qh.data = q_host.data();
    cpu_part = plan_part(qh, cpu_cache, part_options(options, Backend::cpu));
    // q [1, sq, heads, d] with any strides (head_dim contiguous) into a dense host copy.
    for (std::int64_t t = 0; t < plan.seqlen_q; ++t) {
      check(cudaMemcpy2D(q_host.data() + static_cast<std::size_t>(t * plan.num_heads * d) * esize,
                         static_cast<std::size_t>(d) * esize,
                         static_cast<const char*>(q.data) + static_cast<std::size_t>(t * q.stride[1]) * esize,
                         static_cast<std::size_t>(q.stride[2]) * esize, static_cast<std::size_t>(d) * esize,
                         static_cast<std::size_t>(plan.num_heads), cudaMemcpyDeviceToHost),
            "q to the host");
    }
    cpu_thread = std::thread([&] {
      try {
        const TensorView qh = make_tensor(q_host.data(), c.dtype, {1, plan.seqlen_q, plan.num_heads, plan.head_dim});
        cpu_part.run(qh, cpu_cache, cpu_out.data(), cpu_lse.data(), nullptr);
      } catch (...) {
        cpu_error = std::current_exception();
      }
    });
  }
  struct Join {
    std::thread& t;
    ~Join() { if (t.joinable()) t.join(); }
  } join{cpu_thread};

  check(cudaMemsetAsync(acc, 0, acc_bytes, S), "accumulator reset");
  fill_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, S>>>(acc_lse, static_cast<int>(rows), -INFINITY);
  check(cudaGetLastError(), "fill kernel launch");
  // Part 1.
  if (do_dev) {
    dev_part.run(q, dev_cache, part_out[0], part_lse[0], S);
    launch_accumulate(dev_part.out_dtype(), acc, acc_lse, part_out[0], part_lse[0], sq, heads, d, S);
  }
  // Part 2.
  if (do_stream) {
    CopyStream C;
    Events ev;
    cudaEvent_t* copied = ev.e;
    cudaEvent_t* computed = ev.e + 2;
    const std::size_t half_page = cache.page_bytes() / 2;
    const std::size_t token_bytes = half_page / static_cast<std::size_t>(c.page_size);
    const char* host_k = static_cast<const char*>(cache.pool_k(PageTier::host).data);
    const char* host_v = static_cast<const char*>(cache.pool_v(PageTier::host).data);
    // The copy stream starts after the accumulator reset (nothing to wait for but ordering of S's
    // earlier work on the buffers of a previous step: S is synchronised at the end of each step).
    for (std::size_t i = 0; i < n_chunks; ++i) {
      const int b = static_cast<int>(i % 2);
      const StreamChunk& chunk = plan.chunks[i];
      if (i >= 2) check(cudaStreamWaitEvent(C.s, computed[b], 0), "copy waits for the buffer");
      char* dk = static_cast<char*>(cache.staging(b, false).data);
      char* dv = static_cast<char*>(cache.staging(b, true).data);
      std::size_t dst = 0;
      for (std::size_t j = 0; j < chunk.local.size();) {
        // Coalesce pages adjacent in the host pool (an append allocates them in order).
        std::size_t run = 1;
        std::size_t bytes = static_cast<std::size_t>(chunk.tokens[j]) * token_bytes;
        while (j + run < chunk.local.size() && chunk.local[j + run] == chunk.local[j] + static_cast<std::int32_t>(run) &&
               chunk.tokens[j + run - 1] == c.page_size) {
          bytes += static_cast<std::size_t>(chunk.tokens[j + run]) * token_bytes;
          ++run;
        }
        const std::size_t src = static_cast<std::size_t>(chunk.local[j]) * half_page;
        check(cudaMemcpyAsync(dk + dst, host_k + src, bytes, cudaMemcpyHostToDevice, C.s), "page copy (K)");
        check(cudaMemcpyAsync(dv + dst, host_v + src, bytes, cudaMemcpyHostToDevice, C.s), "page copy (V)");
        dst += bytes;
        j += run;
      }
      check(cudaEventRecord(copied[b], C.s), "event record");
      check(cudaStreamWaitEvent(S, copied[b], 0), "attention waits for the copy");
      stage_part.run(q, staged_part_view(cache, b, lengths + 1 + i), part_out[1], part_lse[1], S);
      launch_accumulate(stage_part.out_dtype(), acc, acc_lse, part_out[1], part_lse[1], sq, heads, d, S);
      check(cudaEventRecord(computed[b], S), "event record");
    }
    check(cudaStreamSynchronize(C.s), "copy stream");  // before C and the events are destroyed
  }
  // The step's new tokens.
  if (new_kv != nullptr && new_kv->k.shape[1] > 0) {
    AttentionOptions an = a;
    an.causal = options.attention.causal;
    const TensorView o = make_tensor(part_out[1], c.dtype, {1, plan.seqlen_q, plan.num_heads, plan.head_dim}, c.device);
    const TensorView l = make_tensor(part_lse[1], DType::f32, {1, plan.num_heads, plan.seqlen_q}, c.device);
    forward(q, new_kv->k, new_kv->v, o, l, an);  // forward() writes q's dtype
    launch_accumulate(c.dtype, acc, acc_lse, part_out[1], part_lse[1], sq, heads, d, S);
  }
  // Part 3's result joins last.
  if (do_cpu) {
    cpu_thread.join();
    if (cpu_error) std::rethrow_exception(cpu_error);
    const std::size_t cpu_bytes = static_cast<std::size_t>(rows * d) * dtype_size(cpu_part.out_dtype());
    check(cudaMemcpyAsync(part_out[2], cpu_out.data(), cpu_bytes, cudaMemcpyHostToDevice, S), "CPU partial upload");
    check(cudaMemcpyAsync(part_lse[2], cpu_lse.data(), lse_bytes, cudaMemcpyHostToDevice, S), "CPU lse upload");
    launch_accumulate(cpu_part.out_dtype(), acc, acc_lse, part_out[2], part_lse[2], sq, heads, d, S);
  }
  float* lse_p = lse != nullptr ? static_cast<float*>(lse->data) : nullptr;
  const long long lh = lse != nullptr ? lse->stride[1] : 0, lt = lse != nullptr ? lse->stride[2] : 0;
  const int threads = d < 128 ? d : 128;
  switch (c.dtype) {
    case DType::bf16:
      finish_kernel<<<static_cast<unsigned>(rows), threads, 0, S>>>(acc, acc_lse, static_cast<__nv_bfloat16*>(out.data), out.stride[1],
                                                                    out.stride[2], lse_p, lh, lt, sq, heads, d);
      break;
    case DType::f16:
      finish_kernel<<<static_cast<unsigned>(rows), threads, 0, S>>>(acc, acc_lse, static_cast<__half*>(out.data), out.stride[1],
                                                                    out.stride[2], lse_p, lh, lt, sq, heads, d);
      break;
    default:
      finish_kernel<<<static_cast<unsigned>(rows), threads, 0, S>>>(acc, acc_lse, static_cast<float*>(out.data), out.stride[1],
                                                                    out.stride[2], lse_p, lh, lt, sq, heads, d);
      break;
  }
  check(cudaGetLastError(), "finish kernel launch");
  check(cudaStreamSynchronize(S), "step");
}

}  // namespace fastattn::coop
