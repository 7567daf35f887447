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

}  // namespace fastattn::distributed
