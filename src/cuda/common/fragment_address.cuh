// fragment_address.cuh — per-thread shared-memory addresses for ldmatrix on swizzled tiles,
// with the swizzle XOR worked out once per thread instead of once per load.
//
// SwizzledTile stores chunk c of row r at chunk position c ^ (r % 8) (smem_layout.cuh). Every
// ldmatrix.x4 lane pattern the kernels use gives lane l a row offset with (offset % 8) = l % 8
// and a chunk offset h in {0, 1}; tiles start on rows that are multiples of 8 and on even
// chunks. For such a load at (row0 + offset, chunk0 + h):
//   swizzled chunk = (chunk0 & ~7) + ((chunk0 & 7) ^ (h ^ (l % 8)))
// so a thread keeps base = tile + offset * row_bytes and x = (h ^ (l % 8)) * 16, and each load
// costs one XOR with a compile-time constant, plus an immediate offset.
#pragma once

#include <cstdint>

#include "cuda/common/smem_layout.cuh"

namespace fastattn::cuda {

// The ldmatrix.x4 lane patterns (lane -> row offset, chunk offset) used by the kernels:
//   kA:       A operand, 16x16 row-major from (m rows, k chunks): row l % 16, chunk l / 16.
//   kB:       B operand for two n8 tiles from (n rows, k chunks): row (l / 16) * 8 + l % 8,
//             chunk (l / 8) % 2. With .trans, the same pattern reads an A operand from a
//             (k rows, m chunks) tile (A = tile^T).
//   kBTrans:  B operand, .trans, for two n8 tiles from (k rows, n chunks):
//             row l % 8 + ((l / 8) % 2) * 8, chunk l / 16.
enum class LanePattern { kA, kB, kBTrans };

template <LanePattern kPattern>
__device__ __forceinline__ int pattern_row(int lane) {
  if constexpr (kPattern == LanePattern::kA) return lane % 16;
  if constexpr (kPattern == LanePattern::kB) return (lane / 16) * 8 + lane % 8;
  return lane % 8 + ((lane / 8) % 2) * 8;
}
template <LanePattern kPattern>
__device__ __forceinline__ int pattern_chunk(int lane) {
  if constexpr (kPattern == LanePattern::kA) return lane / 16;
  if constexpr (kPattern == LanePattern::kB) return (lane / 8) % 2;
  return lane / 16;
}

// One thread's view of one swizzled tile for one lane pattern.
template <int kRowElems, LanePattern kPattern>
struct FragmentAddress {
  static constexpr int kRowBytes = kRowElems * 2;
  uint32_t base;  // tile + lane row offset * kRowBytes
  uint32_t x;     // (lane chunk offset ^ lane % 8) * 16

  __device__ __forceinline__ FragmentAddress(uint32_t tile, int lane) {
    base = tile + static_cast<uint32_t>(pattern_row<kPattern>(lane) * kRowBytes);
    x = static_cast<uint32_t>((pattern_chunk<kPattern>(lane) ^ (lane % 8)) * 16);
  }
  // row0: a multiple of 8; chunk0: even. Both usually compile-time after unrolling.
  __device__ __forceinline__ uint32_t at(int row0, int chunk0) const {
    return base + static_cast<uint32_t>(row0 * kRowBytes + (chunk0 & ~7) * 16) +
           (static_cast<uint32_t>((chunk0 & 7) * 16) ^ x);
  }
};

// The same view of a PanelTile (smem_layout.cuh: 64-column panels, the TMA layout). Only the row
// pitch (128 bytes) and the step between 64-column groups (a whole panel) differ from
// FragmentAddress, so the lane XOR is the same.
template <int kPanelRows, LanePattern kPattern>
struct PanelFragmentAddress {
  static constexpr int kPanelBytes = PanelTile<kPanelRows>::kPanelBytes;
  uint32_t base;  // tile + lane row offset * 128
  uint32_t x;     // (lane chunk offset ^ lane % 8) * 16

  __device__ __forceinline__ PanelFragmentAddress(uint32_t tile, int lane) {
    base = tile + static_cast<uint32_t>(pattern_row<kPattern>(lane) * 128);
    x = static_cast<uint32_t>((pattern_chunk<kPattern>(lane) ^ (lane % 8)) * 16);
  }
  // row0: a multiple of 8; chunk0: even.
  __device__ __forceinline__ uint32_t at(int row0, int chunk0) const {
    return base + static_cast<uint32_t>(row0 * 128 + (chunk0 / 8) * kPanelBytes) +
           (static_cast<uint32_t>((chunk0 & 7) * 16) ^ x);
  }
};

}  // namespace fastattn::cuda
