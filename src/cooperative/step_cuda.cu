// step_cuda.cu — the cooperative step on a GPU (fastattn/cooperative.hpp). Three parts at once:
//   part 1  the KV-cache kernel over the device pages, on the caller's stream S;
//   part 2  host pages copied chunk by chunk on a copy stream C into two staging buffers, each
//           chunk attended on S as a contiguous cache as soon as its copy lands (event), the copy
//           of chunk i + 1 running while chunk i is attended; a buffer is refilled only after
//           the attention that read it (event);
//   part 3  the CPU kernels over the CPU's host pages, on the step's host thread (WorkerThread).
// Each partial (out, lse; f32 from the parts' PartialRunners) is accumulated on S into an f32
// accumulator (merge_states' formula; kernels below), rounded once into out at the end.
// Prefill (CooperativeKernel::forward, seqlen_q > 16): parts 1 and 2 run forward() instead of the
// KV-cache kernel, over each run of consecutive device pages (read in place) and over each staged
// chunk (contiguous); their partials are in q's dtype (forward's out) with f32 lse, one f32
// merge pass per run or chunk. The copy stream forks from S before part 1, so the first chunk's
// copy runs under part 1 and chunk i + 1's under chunk i.
// CudaStep holds everything a run uses (planned and allocated once: CooperativeStep); a run
// synchronises S twice (q copied to the host for the CPU part; the end of the step).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/worker_thread.hpp"
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

void launch_finish(DType dtype, const float* acc, const float* acc_lse, const TensorView& out, const TensorView* lse,
                   int sq, int heads, int d, cudaStream_t s) {
  float* lse_p = lse != nullptr ? static_cast<float*>(lse->data) : nullptr;
  const long long lh = lse != nullptr ? lse->stride[1] : 0, lt = lse != nullptr ? lse->stride[2] : 0;
  const unsigned rows = static_cast<unsigned>(sq * heads);
  const int threads = d < 128 ? d : 128;
  switch (dtype) {
    case DType::bf16:
      finish_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<__nv_bfloat16*>(out.data), out.stride[1], out.stride[2],
                                             lse_p, lh, lt, sq, heads, d);
      break;
    case DType::f16:
      finish_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<__half*>(out.data), out.stride[1], out.stride[2], lse_p,
                                             lh, lt, sq, heads, d);
      break;
    default:
      finish_kernel<<<rows, threads, 0, s>>>(acc, acc_lse, static_cast<float*>(out.data), out.stride[1], out.stride[2], lse_p,
                                             lh, lt, sq, heads, d);
      break;
  }
  check(cudaGetLastError(), "finish kernel launch");
}

// The step's CUDA resources, released by this member's destructor (so also when the step's
// constructor throws half-way).
struct StepResources {
  int device = 0;
  char* block = nullptr;                // device scratch
  std::int32_t* host_index = nullptr;   // pinned
  unsigned char* q_host = nullptr;      // pinned
  float* cpu_out = nullptr;             // pinned
  cudaStream_t copy = nullptr;
  cudaEvent_t events[5] = {};  // copied[2], computed[2], fork of the copy stream
  cudaEvent_t timing[2] = {};  // the GPU parts' start and end (last_times)
  StepResources() = default;
  StepResources(const StepResources&) = delete;
  StepResources& operator=(const StepResources&) = delete;
  ~StepResources() {
    (void)cudaSetDevice(device);
    for (auto& e : events) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    for (auto& e : timing) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    if (copy != nullptr) (void)cudaStreamDestroy(copy);
    if (cpu_out != nullptr) cuda_free_pinned(cpu_out);
    if (q_host != nullptr) cuda_free_pinned(q_host);
    if (host_index != nullptr) cuda_free_pinned(host_index);
    if (block != nullptr) cuda_free(device, block);
  }
};

// What one step object holds for its life: the parts' plans and scratch, the device block
// (accumulator, partials, block table, lengths), pinned host staging (the table and lengths
// uploaded per step, q for the CPU part, the CPU part's partial), the copy stream and events.
class CudaStep final : public StepBackend {
 public:
  CudaStep(const TensorView& q, const CooperativeKVCache& cache, const CooperativeOptions& options)
      : cache_(cache), device_(cache.config().device.index) {
    const auto& c = cache.config();
    r_.device = device_;
    check(cudaSetDevice(device_), "cudaSetDevice");
    sq_ = q.shape[1];
    heads_ = q.shape[2];
    d_ = c.head_dim;
    const std::int64_t rows = sq_ * heads_;
    kernel_ = cooperative_gpu_kernel(sq_);
    const std::int64_t staging_pages = static_cast<std::int64_t>(cache.staging_bytes() / 2 / cache.page_bytes());
    max_chunks_ = static_cast<std::size_t>(staging_pages > 0 ? (cache.host_pages() + staging_pages - 1) / staging_pages : 0);
    dev_pages_ = static_cast<std::size_t>(cache.device_pages());
    // Device block: acc f32 [rows, d], acc_lse [rows], partials (f32 [rows, d], lse [rows]; 3 for
    // the KV-cache kernel, one shared by the parts for prefill: every partial is accumulated on
    // S before the next is written there, and q-sized buffers matter at thousands of queries),
    // the device part's block table [device pages], lengths [1 + chunks].
    const int n_partials = kernel_ == CooperativeKernel::forward ? 1 : 3;
    const std::size_t acc_bytes = static_cast<std::size_t>(rows * d_) * sizeof(float);
    const std::size_t lse_bytes = static_cast<std::size_t>(rows) * sizeof(float);
    const auto round = [](std::size_t b) { return (b + 255) / 256 * 256; };
    index_count_ = dev_pages_ + 1 + max_chunks_;
    const std::size_t bytes = round(acc_bytes) + round(lse_bytes) +
                              static_cast<std::size_t>(n_partials) * (round(acc_bytes) + round(lse_bytes)) + round(index_count_ * 4);
    r_.block = static_cast<char*>(cuda_allocate(device_, bytes, "the cooperative step's device scratch"));
    char* at = r_.block;
    auto carve = [&](std::size_t b) { char* p = at; at += round(b); return p; };
    acc_ = reinterpret_cast<float*>(carve(acc_bytes));
    acc_lse_ = reinterpret_cast<float*>(carve(lse_bytes));
    for (int i = 0; i < 3; ++i) {
      part_out_[i] = i < n_partials ? carve(acc_bytes) : part_out_[0];
      part_lse_[i] = i < n_partials ? reinterpret_cast<float*>(carve(lse_bytes)) : part_lse_[0];
    }
    index_ = reinterpret_cast<std::int32_t*>(carve(index_count_ * 4));  // table, then lengths
    host_index_ = r_.host_index =
        static_cast<std::int32_t*>(cuda_allocate_pinned(index_count_ * 4, "the step's block table staging"));
    q_host_ = r_.q_host = static_cast<unsigned char*>(
        cuda_allocate_pinned(static_cast<std::size_t>(rows * d_) * dtype_size(c.dtype), "q for the CPU part"));
    cpu_out_ = r_.cpu_out = static_cast<float*>(cuda_allocate_pinned(acc_bytes + lse_bytes, "the CPU part's partial"));
    cpu_lse_ = cpu_out_ + rows * d_;
    check(cudaStreamCreateWithFlags(&r_.copy, cudaStreamNonBlocking), "cudaStreamCreate (copy stream)");
    copy_ = r_.copy;
    for (auto& e : r_.events) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    std::copy(std::begin(r_.events), std::end(r_.events), events_);
    for (auto& e : r_.timing) check(cudaEventCreate(&e), "cudaEventCreate");
    // The parts' plans, sized for the pools (they hold however the sequence grows).
    // Prefill's GPU parts call forward() (planned per call: host arithmetic only).
    const bool kv = kernel_ == CooperativeKernel::kv_cache;
    const AttentionOptions a = part_options(options, Backend::cuda);
    if (kv && dev_pages_ > 0) dev_ = plan_part(q, paged_part_view(cache, PageTier::device, index_, lengths(), c.device), a);
    if (max_chunks_ > 0) {
      if (kv) stage_ = plan_part(q, staged_part_view(cache, 0, lengths() + 1), a);
      cpu_table_.assign(static_cast<std::size_t>(cache.host_pages()), 0);
      TensorView qh = make_tensor(q_host_, c.dtype, {1, sq_, heads_, d_});
      cpu_ = plan_part(qh, paged_part_view(cache, PageTier::host, cpu_table_.data(), &cpu_seqlen_, Device::cpu()),
                       part_options(options, Backend::cpu));
      worker_ = std::make_unique<WorkerThread>();
    }
  }

  ~CudaStep() override = default;
  CudaStep(const CudaStep&) = delete;
  CudaStep& operator=(const CudaStep&) = delete;

  void run(const StepPlan& plan, const TensorView& q, const TensorView& out, const TensorView* lse,
           const CooperativeNewKV* new_kv, const CooperativeOptions& options) override;

 private:
  std::int32_t* lengths() const { return index_ + dev_pages_; }

  const CooperativeKVCache& cache_;
  int device_;
  StepResources r_;  // owns what the pointers below point into
  std::int64_t sq_ = 0, heads_ = 0, d_ = 0;
  CooperativeKernel kernel_ = CooperativeKernel::kv_cache;  // parts 1 and 2: KV-cache kernel or forward()
  std::size_t max_chunks_ = 0, dev_pages_ = 0, index_count_ = 0;
  float* acc_ = nullptr;
  float* acc_lse_ = nullptr;
  void* part_out_[3] = {};
  float* part_lse_[3] = {};
  std::int32_t* index_ = nullptr;       // device: block table [device pages], lengths [1 + chunks]
  std::int32_t* host_index_ = nullptr;  // pinned staging of index_
  unsigned char* q_host_ = nullptr;     // pinned q [sq, heads, d] for the CPU part
  float* cpu_out_ = nullptr;            // pinned: the CPU part's partial [rows, d], then its lse [rows]
  float* cpu_lse_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t events_[5] = {};  // copied[2], computed[2], fork of the copy stream
  PartialRunner dev_, stage_, cpu_;
  std::vector<std::int32_t> cpu_table_;  // host pool block table of the CPU part
  std::int32_t cpu_seqlen_ = 0;
  std::unique_ptr<WorkerThread> worker_;  // part 3's host thread (host pages only); declared last: stopped first
};

void CudaStep::run(const StepPlan& plan, const TensorView& q, const TensorView& out, const TensorView* lse,
                   const CooperativeNewKV* new_kv, const CooperativeOptions& options) {
  const auto& c = cache_.config();
  check(cudaSetDevice(device_), "cudaSetDevice");
  auto S = static_cast<cudaStream_t>(options.attention.cuda_stream);
  const int sq = static_cast<int>(sq_), heads = static_cast<int>(heads_), d = static_cast<int>(d_);
  const std::int64_t rows = sq_ * heads_;
  const std::size_t esize = dtype_size(c.dtype);
  const std::size_t n_dev = plan.device.local.size();
  const std::size_t n_chunks = plan.chunks.size();
  const bool do_dev = plan.run_device && n_dev > 0;
  const bool do_stream = plan.run_streamed && n_chunks > 0;
  const bool do_cpu = plan.run_cpu && !plan.cpu.local.empty();
  const bool prefill = kernel_ == CooperativeKernel::forward;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point run_start = Clock::now();
  times = {};
  if (plan.split.gpu_kernel != kernel_ || n_chunks > max_chunks_ || n_dev > dev_pages_) {
    throw Error(ErrorCode::internal, "cooperative step: the plan has more chunks or device pages than the step holds");
  }

  // Part 3 first: q to the host (this waits for the caller's work on S that writes q), then the
  // CPU starts on its host thread while the GPU parts are enqueued.
  Clock::time_point parts_start = run_start;
  // Waits for the CPU part on every way out (its job reads this run's locals).
  struct Join {
    WorkerThread* worker = nullptr;
    ~Join() {
      if (worker == nullptr) return;
      try {
        worker->wait();
      } catch (...) {  // the run is already failing
      }
    }
  } join;
  if (do_cpu) {
    for (std::int64_t t = 0; t < sq_; ++t) {  // q [1, sq, heads, d], any strides (head_dim contiguous)
      check(cudaMemcpy2DAsync(q_host_ + static_cast<std::size_t>(t * heads_ * d_) * esize, static_cast<std::size_t>(d) * esize,
                              static_cast<const char*>(q.data) + static_cast<std::size_t>(t * q.stride[1]) * esize,
                              static_cast<std::size_t>(q.stride[2]) * esize, static_cast<std::size_t>(d) * esize,
                              static_cast<std::size_t>(heads), cudaMemcpyDeviceToHost, S),
            "q to the host");
    }
    check(cudaStreamSynchronize(S), "q to the host");
    std::fill(cpu_table_.begin(), cpu_table_.end(), 0);
    std::copy(plan.cpu.local.begin(), plan.cpu.local.end(), cpu_table_.begin());
    cpu_seqlen_ = static_cast<std::int32_t>(plan.cpu.tokens);
    parts_start = Clock::now();  // the GPU parts' start event follows within microseconds
    worker_->submit([&] {
      const TensorView qh = make_tensor(q_host_, c.dtype, {1, sq_, heads_, d_});
      cpu_.run(qh, paged_part_view(cache_, PageTier::host, cpu_table_.data(), &cpu_seqlen_, Device::cpu()), cpu_out_,
               cpu_lse_, nullptr);
      times.cpu_s = std::chrono::duration<double>(Clock::now() - parts_start).count();
    });
    join.worker = worker_.get();
  }

  check(cudaEventRecord(r_.timing[0], S), "event record");
  // The device part's block table and every length, from pinned staging (S was synchronised at
  // the end of the previous step, so the staging is free).
  std::copy(plan.device.local.begin(), plan.device.local.end(), host_index_);
  host_index_[dev_pages_] = static_cast<std::int32_t>(plan.device.tokens);
  for (std::size_t i = 0; i < n_chunks; ++i) host_index_[dev_pages_ + 1 + i] = static_cast<std::int32_t>(plan.chunks[i].total);
  check(cudaMemcpyAsync(index_, host_index_, index_count_ * 4, cudaMemcpyHostToDevice, S), "block table upload");
  check(cudaMemsetAsync(acc_, 0, static_cast<std::size_t>(rows * d) * sizeof(float), S), "accumulator reset");
  fill_kernel<<<static_cast<unsigned>((rows + 255) / 256), 256, 0, S>>>(acc_lse_, static_cast<int>(rows), -INFINITY);
  check(cudaGetLastError(), "fill kernel launch");
  // The copy stream forks from S here, before part 1 (an event: the copies run after S's earlier
  // work, and under part 1).
  if (do_stream) {
    check(cudaEventRecord(events_[4], S), "event record");
    check(cudaStreamWaitEvent(copy_, events_[4], 0), "copy stream fork");
  }
  const AttentionOptions fa = part_options(options, Backend::cuda);  // prefill's forward() calls, on S
  // Part 1.
  if (do_dev && prefill) {
    for (const DeviceRun& run : plan.device_runs) {
      forward_part(q, pool_run_view(cache_, PageTier::device, false, run.first, run.tokens),
                   pool_run_view(cache_, PageTier::device, true, run.first, run.tokens), part_out_[0], part_lse_[0], fa);
      launch_accumulate(c.dtype, acc_, acc_lse_, part_out_[0], part_lse_[0], sq, heads, d, S);
    }
  } else if (do_dev) {
    dev_.run(q, paged_part_view(cache_, PageTier::device, index_, lengths(), c.device), part_out_[0], part_lse_[0], S);
    launch_accumulate(dev_.out_dtype(), acc_, acc_lse_, part_out_[0], part_lse_[0], sq, heads, d, S);
  }
  // Part 2: the copy stream copies chunk i into buffer i % 2 once the attention of chunk i - 2
  // has read it, and joins S at the end.
  if (do_stream) {
    cudaEvent_t* copied = events_;
    cudaEvent_t* computed = events_ + 2;
    const std::size_t half_page = cache_.page_bytes() / 2;
    const std::size_t token_bytes = half_page / static_cast<std::size_t>(c.page_size);
    const char* host_k = static_cast<const char*>(cache_.pool_k(PageTier::host).data);
    const char* host_v = static_cast<const char*>(cache_.pool_v(PageTier::host).data);
    for (std::size_t i = 0; i < n_chunks; ++i) {
      const int b = static_cast<int>(i % 2);
      const StreamChunk& chunk = plan.chunks[i];
      if (i >= 2) check(cudaStreamWaitEvent(copy_, computed[b], 0), "copy waits for the buffer");
      char* dk = static_cast<char*>(cache_.staging(b, false).data);
      char* dv = static_cast<char*>(cache_.staging(b, true).data);
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
        check(cudaMemcpyAsync(dk + dst, host_k + src, bytes, cudaMemcpyHostToDevice, copy_), "page copy (K)");
        check(cudaMemcpyAsync(dv + dst, host_v + src, bytes, cudaMemcpyHostToDevice, copy_), "page copy (V)");
        dst += bytes;
        j += run;
      }
      check(cudaEventRecord(copied[b], copy_), "event record");
      check(cudaStreamWaitEvent(S, copied[b], 0), "attention waits for the copy");
      if (prefill) {
        forward_part(q, staged_run_view(cache_, b, false, chunk.total), staged_run_view(cache_, b, true, chunk.total),
                     part_out_[1], part_lse_[1], fa);
        launch_accumulate(c.dtype, acc_, acc_lse_, part_out_[1], part_lse_[1], sq, heads, d, S);
      } else {
        stage_.run(q, staged_part_view(cache_, b, lengths() + 1 + i), part_out_[1], part_lse_[1], S);
        launch_accumulate(stage_.out_dtype(), acc_, acc_lse_, part_out_[1], part_lse_[1], sq, heads, d, S);
      }
      check(cudaEventRecord(computed[b], S), "event record");
    }
    // Join: the last copy was waited for by the last attention, so S is after every copy.
  }
  check(cudaEventRecord(r_.timing[1], S), "event record");
  // The step's new tokens (forward() writes q's dtype).
  if (new_kv != nullptr && new_kv->k.shape[1] > 0) {
    AttentionOptions an = part_options(options, Backend::cuda);
    an.causal = options.attention.causal;
    const TensorView o = make_tensor(part_out_[1], c.dtype, {1, sq_, heads_, d_}, c.device);
    const TensorView l = make_tensor(part_lse_[1], DType::f32, {1, heads_, sq_}, c.device);
    forward(q, new_kv->k, new_kv->v, o, l, an);
    launch_accumulate(c.dtype, acc_, acc_lse_, part_out_[1], part_lse_[1], sq, heads, d, S);
  }
  // Part 3's result joins last.
  if (do_cpu) {
    join.worker = nullptr;
    worker_->wait();
    const std::size_t cpu_bytes = static_cast<std::size_t>(rows * d) * dtype_size(cpu_.out_dtype());
    check(cudaMemcpyAsync(part_out_[2], cpu_out_, cpu_bytes, cudaMemcpyHostToDevice, S), "CPU partial upload");
    check(cudaMemcpyAsync(part_lse_[2], cpu_lse_, static_cast<std::size_t>(rows) * 4, cudaMemcpyHostToDevice, S),
          "CPU lse upload");
    launch_accumulate(cpu_.out_dtype(), acc_, acc_lse_, part_out_[2], part_lse_[2], sq, heads, d, S);
  }
  launch_finish(c.dtype, acc_, acc_lse_, out, lse, sq, heads, d, S);
  check(cudaStreamSynchronize(S), "step");
  float gpu_ms = 0;
  check(cudaEventElapsedTime(&gpu_ms, r_.timing[0], r_.timing[1]), "event time");
  times.gpu_s = do_dev || do_stream ? gpu_ms * 1e-3 : 0.0;
  times.step_s = std::chrono::duration<double>(Clock::now() - run_start).count();
}

}  // namespace

std::unique_ptr<StepBackend> make_step_cuda(const TensorView& q, const CooperativeKVCache& cache,
                                            const CooperativeOptions& options) {
  return std::make_unique<CudaStep>(q, cache, options);
}

}  // namespace fastattn::coop
