// launch_blocks.hpp — the forward launcher's block sizes, for KernelChoice reports (no CUDA
// headers, so the dispatcher can include it). Must match ForwardConfig in launch.cuh.
#pragma once

namespace fastattn::cuda {

// The block sizes the launcher uses, for KernelChoice reports.
struct ForwardBlocks {
  int block_m, block_n, threads;
};
constexpr ForwardBlocks forward_blocks(int head_dim) {
  return head_dim <= 64 ? ForwardBlocks{128, 128, 128}
         : head_dim <= 128 ? ForwardBlocks{128, 64, 128}
                           : ForwardBlocks{64, 64, 128};
}

}  // namespace fastattn::cuda
