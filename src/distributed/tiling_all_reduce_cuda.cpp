// tiling_all_reduce_cuda.cpp — tiled_all_reduce / matmul_all_reduce for CUDA tensors (NCCL
// builds). NOT YET RUN ON GPUS: compiled only; no multi-GPU machine was available
// (docs/distributed.md says what ran where).
//
// Two streams: the caller's compute stream runs the tiles (cuBLASLt for matmul_all_reduce) and
// records one event per tile; a second, high-priority stream waits for each tile's event and
// runs that tile's all-reduce (the communicator enqueues on it), so tile t's reduction overlaps
// tiles t+1.. of the GEMM. The caller's stream then waits for the last reduction; the call
// itself synchronizes the reduction stream under the communicator's timeout, so a dead peer is
// an Error here rather than a hang at some later synchronize.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/common/cuda_device.hpp"
#include "cuda/common/device_scratch.hpp"

#include "distributed/comm_common.hpp"
#include "distributed/tiling_all_reduce_cuda.hpp"

namespace fastattn::distributed {
namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(ErrorCode::device_error, std::string("tiling-AllReduce: ") + what + " failed: " + cudaGetErrorString(e));
}
void check_lt(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(ErrorCode::device_error, std::string("tiling-AllReduce: ") + what + " failed: cublasStatus " + std::to_string(static_cast<int>(s)));
}

// Tile rows on a GPU: about 8 tiles, rounded up to a multiple of 128 rows (the GEMM's row tile)
// so no tile ends in a partial row of thread blocks (FlashOverlap's wave-quantization point).
std::int64_t cuda_tile_rows(std::int64_t rows, std::string& reason) {
  reason = "CUDA: about 8 tiles, each a multiple of 128 rows (whole GEMM row tiles)";
  const std::int64_t t = ((rows + 7) / 8 + 127) / 128 * 128;
  return std::max<std::int64_t>(1, std::min(t, rows));
}

// The reduction stream and the per-tile events of one call.
struct CommStreams {
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> ready;
  cudaEvent_t done = nullptr;
  explicit CommStreams(std::int64_t tiles) {
    int least = 0, greatest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    // High priority: a tile's small reduction kernels are scheduled ahead of queued GEMM blocks.
    check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), "cudaStreamCreateWithPriority");
    ready.resize(static_cast<std::size_t>(tiles), nullptr);
    for (cudaEvent_t& e : ready) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CommStreams() {
    for (cudaEvent_t e : ready)
      if (e) cudaEventDestroy(e);
    if (done) cudaEventDestroy(done);
    if (stream) cudaStreamDestroy(stream);
  }
  CommStreams(const CommStreams&) = delete;
  CommStreams& operator=(const CommStreams&) = delete;
};

TensorView tile_rows_view(TensorView t, std::int64_t begin, std::int64_t end) {
  t.data = static_cast<std::uint8_t*>(t.data) + begin * t.stride[0] * static_cast<std::int64_t>(dtype_size(t.dtype));
  t.shape[0] = end - begin;
  return t;
}

cudaDataType_t lt_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

}  // namespace

TilingAllReduceReport tiled_all_reduce_cuda(Communicator& comm, const TensorView& out,
                                            const std::function<void(std::int64_t, std::int64_t)>& produce,
                                            const TilingAllReduceOptions& options) {
  TilingAllReduceReport report;
  report.path = "cuda-streams+nccl";
  const std::int64_t rows = out.shape[0];
  report.tile_rows = options.tile_rows > 0 ? options.tile_rows : cuda_tile_rows(rows, report.reason);
  if (options.tile_rows > 0) report.reason = "tile_rows given by the caller";
  report.num_tiles = rows == 0 ? 0 : (rows + report.tile_rows - 1) / report.tile_rows;
  report.overlapped = options.overlap && report.num_tiles > 1;
  const cudaStream_t compute = static_cast<cudaStream_t>(options.cuda_stream);
  const cuda::DeviceGuard device_guard(out.device.index);  // the caller's device comes back on return
  CommStreams comm_streams(report.num_tiles);
  const std::int64_t tile = report.tile_rows;
  try {
    for (std::int64_t t = 0; t < report.num_tiles; ++t) {
      const std::int64_t end = std::min(rows, (t + 1) * tile);
      produce(t * tile, end);
      cudaEvent_t ready = comm_streams.ready[static_cast<std::size_t>(t)];
      check_cuda(cudaEventRecord(ready, compute), "cudaEventRecord");
      if (report.overlapped) {
        check_cuda(cudaStreamWaitEvent(comm_streams.stream, ready, 0), "cudaStreamWaitEvent");
        comm.all_reduce_sum(tile_rows_view(out, t * tile, end), comm_streams.stream);
      }
    }
    if (!report.overlapped && report.num_tiles > 0) {
      check_cuda(cudaStreamWaitEvent(comm_streams.stream, comm_streams.ready.back(), 0), "cudaStreamWaitEvent");
      comm.all_reduce_sum(out, comm_streams.stream);
    }
  } catch (const Error& e) {
    if (e.code() != ErrorCode::device_error || !comm.aborted()) comm.abort(std::string("tiled_all_reduce failed: ") + e.what());
    throw;
  } catch (const std::exception& e) {
    comm.abort(std::string("tiled_all_reduce: produce threw: ") + e.what());
    throw;
  }
  check_cuda(cudaEventRecord(comm_streams.done, comm_streams.stream), "cudaEventRecord");
  check_cuda(cudaStreamWaitEvent(compute, comm_streams.done, 0), "cudaStreamWaitEvent");
  comm.synchronize(comm_streams.stream);
  return report;
}

// One cuBLASLt handle per device for the life of the process (never destroyed: destroying it
// at exit could run after the CUDA runtime has been torn down).
static cublasLtHandle_t lt_handle(int device) {
  static std::mutex mutex;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>();
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = handles->find(device);
  if (it != handles->end()) return it->second;
  cublasLtHandle_t handle = nullptr;
  check_lt(cublasLtCreate(&handle), "cublasLtCreate");
  handles->emplace(device, handle);
  return handle;
}

TilingAllReduceReport matmul_all_reduce_cuda(Communicator& comm, const TensorView& attn_out, const TensorView& w_o,
                                             const TensorView& out, const TilingAllReduceOptions& options) {
  const std::int64_t k = attn_out.shape[1], n = w_o.shape[1];
  const std::size_t elem = dtype_size(out.dtype);
  const cudaDataType_t type = lt_type(out.dtype);
  const cudaStream_t compute = static_cast<cudaStream_t>(options.cuda_stream);
  const cuda::DeviceGuard device_guard(out.device.index);

  // Row-major out[M, N] = attn_out[M, K] @ w_o[K, N] is column-major out^T = w_o^T attn_out^T:
  // cuBLASLt's A = w_o as an (N x K, ld N) matrix, B = the tile of attn_out as (K x rows, ld K),
  // C = the tile of out as (N x rows, ld N). f32 accumulation.
  // The cuBLASLt handle is made once per device and kept (a handle carries no stream state, so
  // concurrent calls may share it); the descriptors are host objects, cheap to make per call.
  // The workspace comes from fastattn's stream-ordered scratch pool on the compute stream, so
  // the steady state makes no cudaMalloc and the GEMM tiles' use of it is stream-ordered.
  struct Lt {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    void* workspace = nullptr;
    cudaStream_t stream = nullptr;
    ~Lt() {
      if (workspace) (void)cudaFreeAsync(workspace, stream);
      if (preference) cublasLtMatmulPreferenceDestroy(preference);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  } lt;
  lt.stream = compute;
  const cublasLtHandle_t handle = lt_handle(out.device.index);
  constexpr std::size_t kWorkspaceBytes = 32u << 20;
  check_lt(cublasLtMatmulDescCreate(&lt.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  check_lt(cublasLtMatmulPreferenceCreate(&lt.preference), "cublasLtMatmulPreferenceCreate");
  std::size_t workspace_bytes = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(lt.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof workspace_bytes),
           "cublasLtMatmulPreferenceSetAttribute");
  check_cuda(cudaMallocFromPoolAsync(&lt.workspace, kWorkspaceBytes, cuda::scratch_pool(out.device.index), compute),
             "cudaMallocFromPoolAsync (cuBLASLt workspace)");

  auto gemm_tile = [&](std::int64_t row_begin, std::int64_t row_end) {
    const std::uint64_t rows = static_cast<std::uint64_t>(row_end - row_begin);
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    struct Layouts {
      cublasLtMatrixLayout_t* l[3];
      ~Layouts() {
        for (auto* p : l)
          if (*p) cublasLtMatrixLayoutDestroy(*p);
      }
    } layouts{{&a, &b, &c}};
    check_lt(cublasLtMatrixLayoutCreate(&a, type, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(k), n), "cublasLtMatrixLayoutCreate");
    check_lt(cublasLtMatrixLayoutCreate(&b, type, static_cast<std::uint64_t>(k), rows, k), "cublasLtMatrixLayoutCreate");
    check_lt(cublasLtMatrixLayoutCreate(&c, type, static_cast<std::uint64_t>(n), rows, n), "cublasLtMatrixLayoutCreate");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle, lt.desc, a, b, c, c, lt.preference, 1, &heuristic, &found),
             "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
      throw Error(ErrorCode::unsupported, "matmul_all_reduce: cuBLASLt has no algorithm for this tile (" + std::to_string(rows) + " x " +
                                              std::to_string(n) + " x " + std::to_string(k) + ")");
    const float alpha = 1.0f, beta = 0.0f;
    const auto* tile_in = static_cast<const std::uint8_t*>(attn_out.data) + static_cast<std::size_t>(row_begin * k) * elem;
    auto* tile_out = static_cast<std::uint8_t*>(out.data) + static_cast<std::size_t>(row_begin * n) * elem;
    check_lt(cublasLtMatmul(handle, lt.desc, &alpha, w_o.data, a, tile_in, b, &beta, tile_out, c, tile_out, c, &heuristic.algo,
                            lt.workspace, kWorkspaceBytes, compute),
             "cublasLtMatmul");
  };
  TilingAllReduceReport report = tiled_all_reduce_cuda(comm, out, gemm_tile, options);
  report.path = "cuda-cublaslt+nccl";
  return report;
}

}  // namespace fastattn::distributed
