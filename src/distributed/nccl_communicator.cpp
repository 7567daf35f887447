// nccl_communicator.cpp — the NCCL backend of Communicator (compiled when CMake finds NCCL:
// FASTATTN_NCCL). NOT YET RUN ON GPUS: compiled against NCCL 2.28.9 only (docs/distributed.md).
//
// The failure policy (fastattn/distributed.hpp) on NCCL: the communicator is created
// non-blocking (ncclConfig_t::blocking = 0), so no NCCL call blocks the host; every wait is a
// poll of ncclCommGetAsyncError (and cudaStreamQuery for enqueued work) against a deadline.
// An NCCL error or the deadline aborts the communicator (ncclCommAbort, which also releases the
// kernels still waiting for a peer) and throws; the peers, waiting on this rank, then reach
// their own deadline or see the error. NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0
// unless the user set it, and nothing here allocates multicast memory.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cuda/common/cuda_device.hpp"
#include "distributed/comm_common.hpp"

namespace fastattn::distributed {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
  }
  return ncclFloat32;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const NcclUniqueId& id, int rank, int size, int device, const NcclOptions& options)
      : rank_(rank), size_(size), device_(device), options_(options) {
    // NVLS off unless the caller decided otherwise (overwrite = 0).
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    // The communicator's device is current while it is made (NCCL binds the communicator to the
    // current device); the caller's device comes back when the constructor returns.
    const cuda::DeviceGuard device_guard(device_);
    ncclUniqueId nid;
    static_assert(sizeof(nid.internal) == sizeof(id.bytes), "ncclUniqueId size");
    std::memcpy(nid.internal, id.bytes.data(), sizeof(nid.internal));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
    if (options_.cta_policy >= 0) config.CTAPolicy = options_.cta_policy;
#endif
    if (options_.max_ctas > 0) config.maxCTAs = options_.max_ctas;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, nid, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      comm_ = nullptr;
      fail_comm(rank_, size_, std::string("ncclCommInitRankConfig failed: ") + ncclGetErrorString(r));
    }
    try {
      wait_for_progress("ncclCommInitRankConfig (waiting for every rank to join)");
      check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
      check_cuda(cudaStreamCreateWithFlags(&internal_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    } catch (...) {
      abort("initialisation failed");  // frees the communicator; the destructor will not run
      if (internal_stream_) cudaStreamDestroy(internal_stream_);
      if (scratch_) cudaFree(scratch_);
      throw;
    }
  }

  ~NcclCommunicator() override {
    if (internal_stream_) cudaStreamDestroy(internal_stream_);
    if (scratch_) cudaFree(scratch_);
    if (!comm_) return;  // never created, or aborted (ncclCommAbort freed it)
    // A clean shutdown flushes (finalize) and destroys; an error or the deadline aborts.
    ncclResult_t state = ncclCommFinalize(comm_);
    const auto deadline = Clock::now() + options_.comm.timeout;
    while (state == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state != ncclSuccess) {
      ncclCommAbort(comm_);
      return;
    }
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Device device() const override { return Device::cuda(device_); }
  const char* backend_name() const override { return "nccl"; }

  void all_reduce_sum(const TensorView& buffer, void* stream) override {
    check_reduce_buffer(buffer, device(), "all_reduce_sum: buffer");
    throw_if_aborted("all_reduce_sum");
    enqueue(ncclAllReduce(buffer.data, buffer.data, static_cast<std::size_t>(buffer.numel()), nccl_type(buffer.dtype), ncclSum,
                          comm_, static_cast<cudaStream_t>(stream)),
            "ncclAllReduce");
  }

  void send_recv(const TensorView& send, int dst, const TensorView& recv, int src, void* stream) override {
    check_message_buffer(send, device(), "send_recv: send");
    check_message_buffer(recv, device(), "send_recv: recv");
    check_peer(dst, size_, "send_recv: dst");
    check_peer(src, size_, "send_recv: src");
    throw_if_aborted("send_recv");
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (dst == rank_ && src == rank_) {
      if (view_bytes(send) != view_bytes(recv))
        fail_argument_sizes(view_bytes(send), view_bytes(recv));
      check_cuda(cudaMemcpyAsync(recv.data, send.data, view_bytes(send), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      return;
    }
    // Bytes travel as ncclUint8: the views may have any dtype.
    enqueue(ncclGroupStart(), "ncclGroupStart");
    if (view_bytes(send)) enqueue(ncclSend(send.data, view_bytes(send), ncclUint8, dst, comm_, s), "ncclSend");
    if (view_bytes(recv)) enqueue(ncclRecv(recv.data, view_bytes(recv), ncclUint8, src, comm_, s), "ncclRecv");
    enqueue(ncclGroupEnd(), "ncclGroupEnd");
  }

  void barrier() override {
    throw_if_aborted("barrier");
    enqueue(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, internal_stream_), "ncclAllReduce (barrier)");
    synchronize(internal_stream_);
  }

  void synchronize(void* stream) override {
    throw_if_aborted("synchronize");
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    const auto deadline = Clock::now() + options_.comm.timeout;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        abort(std::string("CUDA error while waiting: ") + cudaGetErrorString(q));
        fail_comm(rank_, size_, std::string("synchronize failed: cudaStreamQuery: ") + cudaGetErrorString(q));
      }
      poll_async_error("synchronize");
      if (Clock::now() > deadline) timeout("synchronize (a peer died or stopped calling)");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  void abort(const std::string& reason) noexcept override {
    if (aborted_) return;
    aborted_ = true;
    reason_ = reason;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  bool aborted() const noexcept override { return aborted_; }

 private:
  void check_cuda(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail_comm(rank_, size_, std::string(what) + " failed: " + cudaGetErrorString(e));
  }
  [[noreturn]] void fail_argument_sizes(std::size_t sent, std::size_t received) {
    throw Error(ErrorCode::invalid_argument, "send_recv: recv: expected " + std::to_string(sent) +
                                                 " bytes (what this rank sends itself), got " + std::to_string(received));
  }
  void throw_if_aborted(const std::string& what) {
    if (aborted_) fail_comm(rank_, size_, what + " failed: the communicator was aborted (" + reason_ + ")");
  }
  [[noreturn]] void timeout(const std::string& what) {
    abort("timed out after " + format_ms(options_.comm.timeout) + " in " + what);
    fail_comm(rank_, size_, what + " failed: timed out after " + format_ms(options_.comm.timeout));
  }
  // Fails on an asynchronous NCCL error (a peer's failure seen through the network/NVLink
  // proxy, a remote abort). ncclInProgress is not an error.
  void poll_async_error(const std::string& what) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
      const std::string detail = std::string(ncclGetErrorString(r != ncclSuccess ? r : state)) + " (" + ncclGetLastError(comm_) + ")";
      abort("NCCL error: " + detail);
      fail_comm(rank_, size_, what + " failed: NCCL error: " + detail);
    }
  }
  // Waits until the non-blocking communicator leaves ncclInProgress.
  void wait_for_progress(const std::string& what) {
    const auto deadline = Clock::now() + options_.comm.timeout;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r == ncclSuccess && state == ncclSuccess) return;
      if (r != ncclSuccess || state != ncclInProgress) poll_async_error(what);
      if (Clock::now() > deadline) timeout(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  // An NCCL call on the non-blocking communicator: ncclInProgress means "being enqueued".
  void enqueue(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) {
      wait_for_progress(what);
      return;
    }
    const std::string detail = std::string(ncclGetErrorString(r)) + " (" + ncclGetLastError(comm_) + ")";
    abort(std::string(what) + " failed: " + detail);
    fail_comm(rank_, size_, std::string(what) + " failed: " + detail);
  }

  ncclComm_t comm_ = nullptr;
  int rank_, size_, device_;
  NcclOptions options_;
  float* scratch_ = nullptr;
  cudaStream_t internal_stream_ = nullptr;
  bool aborted_ = false;
  std::string reason_;
};

}  // namespace

bool nccl_compiled() noexcept { return true; }

NcclUniqueId nccl_unique_id() {
  ncclUniqueId nid;
  const ncclResult_t r = ncclGetUniqueId(&nid);
  if (r != ncclSuccess)
    throw Error(ErrorCode::device_error, std::string("distributed: ncclGetUniqueId failed: ") + ncclGetErrorString(r));
  NcclUniqueId id;
  std::memcpy(id.bytes.data(), nid.internal, sizeof(nid.internal));
  return id;
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId& id, int rank, int size, int device,
                                                     const NcclOptions& options) {
  if (size < 1) throw Error(ErrorCode::invalid_argument, "make_nccl_communicator: size: expected >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    throw Error(ErrorCode::invalid_argument, "make_nccl_communicator: rank: expected a rank in [0, " + std::to_string(size) +
                                                 "), got " + std::to_string(rank));
  if (device < 0)
    throw Error(ErrorCode::invalid_argument, "make_nccl_communicator: device: expected a CUDA ordinal >= 0, got " + std::to_string(device));
  if (options.comm.timeout.count() <= 0)
    throw Error(ErrorCode::invalid_argument, "make_nccl_communicator: options.comm.timeout: expected > 0 ms, got " +
                                                 std::to_string(options.comm.timeout.count()));
  return std::make_unique<NcclCommunicator>(id, rank, size, device, options);
}

}  // namespace fastattn::distributed
