// cuda_sm90_forward_shape.hpp — the padded call on an H200-like device that the sm90 forward's
// plan tests start from (cuda_forward_path_test.cpp, cuda_sm90_forward_rules_test.cpp).
#pragma once

#include <cstdint>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"

namespace fastattn::testing {

// A padded call on an H200-like device (132 SMs, 228 KiB of shared memory) on the sm90 path.
inline cuda::ForwardShape hopper_shape(std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t sk,
                                       std::int64_t d) {
  cuda::ForwardShape s;
  s.batch = b;
  s.num_heads = h;
  s.head_dim = d;
  s.seqlen_q = sq;
  s.seqlen_k = sk;
  s.total_q = b * sq;
  s.multiprocessors = 132;
  s.smem_per_multiprocessor = 233472;
  s.path = cuda::ForwardPath::sm90;
  return s;
}

}  // namespace fastattn::testing
