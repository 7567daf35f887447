// comm_common.hpp — what every communicator backend shares: argument checks and the error
// every communication failure becomes.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "fastattn/distributed.hpp"

namespace fastattn::distributed {

// A communication failure: ErrorCode::device_error, "distributed: rank R of N: <what>".
[[noreturn]] void fail_comm(int rank, int size, const std::string& what);

// all_reduce_sum's buffer: contiguous, f32 / f16 / bf16, on `device`. Throws invalid_argument
// naming `arg`.
void check_reduce_buffer(const TensorView& t, const Device& device, const std::string& arg);
// send_recv's views: contiguous (any dtype), on `device`.
void check_message_buffer(const TensorView& t, const Device& device, const std::string& arg);
// 0 <= peer < size.
void check_peer(int peer, int size, const std::string& arg);

std::size_t view_bytes(const TensorView& t);

std::string format_ms(std::chrono::milliseconds ms);

// Runs `body`; a failure on this rank aborts `comm` so the peers fail fast instead of waiting
// out the timeout, then rethrows. A device_error is a communication failure already seen by
// the group, so it is rethrown without a second abort. `what` names the operation in the
// abort message, e.g. "ring attention".
template <typename Body>
void with_abort_on_failure(Communicator& comm, const char* what, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.code() != ErrorCode::device_error) comm.abort(std::string(what) + " failed on this rank: " + e.what());
    throw;
  } catch (const std::exception& e) {
    comm.abort(std::string(what) + " failed on this rank: " + e.what());
    throw;
  }
}

}  // namespace fastattn::distributed
