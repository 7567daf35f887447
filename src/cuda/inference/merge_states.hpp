// merge_states.hpp — the CUDA merge_states kernel's launch plan and entry point (plain C++: no
// CUDA headers, so the dispatcher and host-only tests include it).
#pragma once

#include <cstdint>

#include "inference/merge_problem.hpp"

namespace fastattn::cuda {

// How merge_states is launched: a block of threads_x * threads_y threads merges threads_y rows
// (one (batch, token, head) row per threadIdx.y), each thread of a row covering every
// threads_x-th chunk of vector_elems elements.
struct MergeLaunch {
  int vector_elems = 1;  // elements per load / store: 16 bytes' worth, or 1 (scalar)
  int threads_x = 1;     // threads per row
  int threads_y = 1;     // rows per block
  std::int64_t blocks = 0;
  const char* why_scalar = "";  // when vector_elems == 1: the reason, for KernelChoice::reason
};

inline bool aligned_for_vectors(const Operand& op, std::int64_t elems, std::size_t elem_bytes) {
  return reinterpret_cast<std::uintptr_t>(op.data) % (static_cast<std::uintptr_t>(elems) * elem_bytes) == 0 &&
         op.stride.batch % elems == 0 && op.stride.token % elems == 0 && op.stride.head % elems == 0;
}

// 16-byte loads when head_dim and every out row allow them (rows 16-byte aligned), else
// element by element; ~256 threads per block, at most a warp per row (a row is 16..512 bytes).
inline MergeLaunch plan_merge(const MergeProblem& p) {
  MergeLaunch l;
  const std::size_t elem_bytes = dtype_size(p.dtype);
  const std::int64_t vec = static_cast<std::int64_t>(16 / elem_bytes);
  if (p.head_dim % vec != 0) {
    l.why_scalar = "head_dim is not a multiple of 16 bytes";
  } else if (!aligned_for_vectors(p.out_a, vec, elem_bytes) || !aligned_for_vectors(p.out_b, vec, elem_bytes) ||
             !aligned_for_vectors(p.out, vec, elem_bytes)) {
    l.why_scalar = "an out row is not 16-byte aligned (data pointer or strides)";
  } else {
    l.vector_elems = static_cast<int>(vec);
  }
  const std::int64_t chunks = p.head_dim / l.vector_elems;
  l.threads_x = static_cast<int>(chunks < 32 ? chunks : 32);
  l.threads_y = 256 / l.threads_x > 0 ? 256 / l.threads_x : 1;
  l.blocks = (p.rows() + l.threads_y - 1) / l.threads_y;
  return l;
}

// Runs the plan on p's device and options' stream (asynchronous); throws Error(device_error)
// when a CUDA call or the launch fails.
void merge_states(const MergeProblem& p, const MergeLaunch& launch);

}  // namespace fastattn::cuda
