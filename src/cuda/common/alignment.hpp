// alignment.hpp — the CUDA kernels' layout requirement on every tensor they read or write.
#pragma once

#include <cstdint>
#include <string>

#include "common/problem.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// cp.async and the vector stores move 16-byte chunks: rows must start on 16-byte boundaries.
inline void check_row_alignment(const void* data, const TokenStrides& s, const char* name) {
  const bool aligned = reinterpret_cast<std::uintptr_t>(data) % 16 == 0 && s.token % 8 == 0 && s.head % 8 == 0 &&
                       s.batch % 8 == 0;
  if (!aligned) {
    throw Error(ErrorCode::unsupported,
                std::string(name) + ": expected 16-byte aligned rows for the CUDA kernels (data pointer and " +
                    "token/head/batch strides multiples of 8 elements), got strides " + std::to_string(s.batch) +
                    ", " + std::to_string(s.token) + ", " + std::to_string(s.head));
  }
}

}  // namespace fastattn::cuda
