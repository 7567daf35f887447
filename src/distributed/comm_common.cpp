// comm_common.cpp — checks and errors shared by the communicator backends, ring_shift, and the
// NCCL entry points of a build without NCCL.
#include "distributed/comm_common.hpp"

#include "api/view_checks.hpp"

namespace fastattn::distributed {

void fail_comm(int rank, int size, const std::string& what) {
  throw Error(ErrorCode::device_error,
              "distributed: rank " + std::to_string(rank) + " of " + std::to_string(size) + ": " + what);
}

void check_message_buffer(const TensorView& t, const Device& device, const std::string& arg) {
  check_view_layout(t, arg);
  if (t.device != device) fail_argument(arg, "a tensor on the communicator's device " + to_string(device), to_string(t.device));
  if (!t.is_contiguous()) fail_argument(arg, "a contiguous tensor", "strides of a non-contiguous view of shape " + t.shape_string());
}

void check_reduce_buffer(const TensorView& t, const Device& device, const std::string& arg) {
  check_message_buffer(t, device, arg);
  if (t.dtype != DType::f32 && t.dtype != DType::f16 && t.dtype != DType::bf16)
    fail_argument(arg, "dtype f32, f16 or bf16", to_string(t.dtype));
}

void check_peer(int peer, int size, const std::string& arg) {
  if (peer < 0 || peer >= size)
    fail_argument(arg, "a rank in [0, " + std::to_string(size) + ")", std::to_string(peer));
}

std::size_t view_bytes(const TensorView& t) {
  return static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype);
}

std::string format_ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

void ring_shift(Communicator& comm, const TensorView& send, const TensorView& recv, int shift, void* stream) {
  const int n = comm.size();
  const int s = ((shift % n) + n) % n;
  comm.send_recv(send, (comm.rank() + s) % n, recv, (comm.rank() - s + n) % n, stream);
}

#if !FASTATTN_HAVE_NCCL
bool nccl_compiled() noexcept { return false; }

NcclUniqueId nccl_unique_id() {
  throw Error(ErrorCode::unsupported, "nccl_unique_id: fastattn was built without NCCL (CMake FASTATTN_NCCL=OFF or NCCL not found)");
}

std::unique_ptr<Communicator> make_nccl_communicator(const NcclUniqueId&, int, int, int, const NcclOptions&) {
  throw Error(ErrorCode::unsupported,
              "make_nccl_communicator: fastattn was built without NCCL (CMake FASTATTN_NCCL=OFF or NCCL not found)");
}
#endif

}  // namespace fastattn::distributed
