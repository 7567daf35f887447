// cuda_forward_shapes.hpp — the padded calls on an H100 / H200-like device that the CUDA forward
// plan tests start from (cuda_forward_plan_test.cpp, cuda_forward_path_test.cpp,
// cuda_sm90_forward_rules_test.cpp).
#pragma once

#include <cstdint>

#include "cuda/flash_fwd/heuristics.hpp"
#include "cuda/forward_path.hpp"

namespace fastattn::testing {

// An H100 / H200: 132 SMs, 228 KiB shared memory per SM; the path left to the plan.
inline cuda::ForwardShape h200_shape(std::int64_t batch, std::int64_t heads, std::int64_t seqlen_q,
                                     std::int64_t seqlen_k, std::int64_t head_dim = 128) {
  cuda::ForwardShape s;
  s.batch = batch;
  s.num_heads = heads;
  s.head_dim = head_dim;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = seqlen_k;
  s.total_q = batch * seqlen_q;
  s.multiprocessors = 132;
  s.smem_per_multiprocessor = 228 * 1024;
  return s;
}

// The same call on the sm90 path.
inline cuda::ForwardShape hopper_shape(std::int64_t b, std::int64_t h, std::int64_t sq, std::int64_t sk,
                                       std::int64_t d) {
  cuda::ForwardShape s = h200_shape(b, h, sq, sk, d);
  s.path = cuda::ForwardPath::sm90;
  return s;
}

}  // namespace fastattn::testing
