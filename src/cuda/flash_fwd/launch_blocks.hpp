// launch_blocks.hpp — the forward launchers' block sizes, for the dispatcher's heuristics and
// KernelChoice reports (no CUDA headers, so the dispatcher can include it). Must match
// ForwardConfig / DecodeConfig in launch.cuh, which are built from these functions.
#pragma once

#include "cuda/forward_path.hpp"

namespace fastattn::cuda {

// The block sizes a launcher uses, for KernelChoice reports.
struct ForwardBlocks {
  int block_m, block_n, threads;
};

// The main kernel (kernel.cuh): 4 warps, 128 query rows (64 at d = 256), one K and one V buffer.
constexpr ForwardBlocks forward_blocks(int head_dim) {
  return head_dim <= 64 ? ForwardBlocks{128, 128, 128}
         : head_dim <= 128 ? ForwardBlocks{128, 64, 128}
                           : ForwardBlocks{64, 64, 128};
}

// The main kernel's blocks on the Volta / Turing paths (sm70/forward_arch.cuh,
// sm75/forward_arch.cuh): smaller tiles, sized for 64 KB (sm75) / 96 KB (sm70) of shared memory
// and for the registers that hold the prefetched tile (no cp.async). Not tuned yet.
//   sm75: 16-row MMA tiles; d <= 64: 128 x 64 (32 KiB, 2 CTAs per SM); d = 96/128: 64 x 32
//         (32 KiB); d = 256: 64 x 16 (48 KiB; 64 x 32 spilled 56 bytes at sm_75).
//   sm70: 32-row MMA tiles (one per warp); d <= 64: 128 x 64 (36 KiB); d > 64: 128 x 32
//         (52 KiB at d = 128).
constexpr ForwardBlocks forward_blocks_for(ForwardPath path, int head_dim) {
  if (path == ForwardPath::sm75) {
    return head_dim <= 64 ? ForwardBlocks{128, 64, 128} : head_dim <= 128 ? ForwardBlocks{64, 32, 128}
                                                                         : ForwardBlocks{64, 16, 128};
  }
  if (path == ForwardPath::sm70) return head_dim <= 64 ? ForwardBlocks{128, 64, 128} : ForwardBlocks{128, 32, 128};
  return forward_blocks(head_dim);
}

// The short-query kernel (kernel_decode.cuh), for seqlen_q <= kDecodeMaxSeqlenQ: one warp, one
// 16-row MMA tile of queries, kDecodeStages (K, V) buffers of 16 KiB each per tensor
// (block_n * head_dim * 2 bytes), so a CTA keeps up to 64 KiB of K/V reads in flight.
constexpr int kDecodeMaxSeqlenQ = 16;
constexpr int kDecodeStages = 2;
constexpr ForwardBlocks decode_blocks(int head_dim) {
  return head_dim <= 64 ? ForwardBlocks{16, 128, 32}
         : head_dim <= 128 ? ForwardBlocks{16, 64, 32}
                           : ForwardBlocks{16, 32, 32};
}

// Shared memory of a launcher: Q plus `stages` (K, V) pairs of 16-bit rows, padded to a
// multiple of 64 elements (traits.cuh: kSmemRowElems).
constexpr int forward_smem_bytes(const ForwardBlocks& b, int head_dim, int stages) {
  const int row_bytes = (head_dim + 63) / 64 * 64 * 2;
  return (b.block_m + 2 * stages * b.block_n) * row_bytes;
}

// The same for a path's main kernel: sm70 rows are an odd number of 16-byte chunks
// (common/smem_layout.cuh: PaddedTile), the others swizzled rows as above.
constexpr int forward_smem_bytes_for(ForwardPath path, const ForwardBlocks& b, int head_dim) {
  if (path != ForwardPath::sm70) return forward_smem_bytes(b, head_dim, 1);
  const int chunks = head_dim / 8 % 2 == 0 ? head_dim / 8 + 1 : head_dim / 8;
  return (b.block_m + 2 * b.block_n) * chunks * 16;
}

}  // namespace fastattn::cuda
