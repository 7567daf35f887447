// smem_layout.cuh — row-major tiles of 16-bit elements in shared memory.
//
// SwizzledTile (sm80, sm75: ldmatrix): a tile row of head_dim elements is split into 16-byte
// chunks (8 elements). Chunk c of row r is stored at chunk position c ^ (r % 8). ldmatrix reads
// one 16-byte chunk from each of 8 consecutive rows at the same logical column: unswizzled, rows
// 256 bytes apart would all hit the same 4 banks (an 8-way conflict); swizzled, the 8 chunks land
// in 8 distinct bank groups. Needs at least 8 chunks per row (head_dim >= 64). cp.async writes
// use the same mapping.
//
// PaddedTile (sm70: no ldmatrix): rows of an odd number of 16-byte chunks (head_dim / 8, plus
// one chunk of padding when that is even), unswizzled. Any 8 consecutive rows at one chunk then
// fall into 8 distinct 16-byte bank groups (row stride odd mod 8); the bank analysis of the
// m8n8k4 operand loads is in sm70/forward_arch.cuh.
#pragma once

#include <cstdint>

namespace fastattn::cuda {

template <int kRowElems_>
struct SwizzledTile {
  static constexpr int kRowElems = kRowElems_;
  static constexpr int kChunks = kRowElems / 8;  // 16-byte chunks per row
  static_assert(kChunks >= 8 && kChunks % 8 == 0, "swizzle needs rows of >= 64 16-bit elements");

  // Byte offset of (row, chunk) from the tile start.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunks + (chunk ^ (row & 7))) * 16);
  }
};

// PanelTile (sm90 TMA, SWIZZLE_128B): the tile stored as 64-column panels, panel j holding
// columns 64j .. 64j + 63 of all kPanelRows rows in kPanelRows x 128 bytes (1024-byte aligned),
// chunk c of row r at chunk position c ^ (r % 8) within its 128-byte row, as TMA writes it.
template <int kPanelRows>
struct PanelTile {
  static constexpr int kPanelBytes = kPanelRows * 128;

  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((chunk / 8) * kPanelBytes + row * 128 + (((chunk % 8) ^ (row & 7)) * 16));
  }
};

template <int kHeadDim>
struct PaddedTile {
  static constexpr int kDataChunks = kHeadDim / 8;
  static constexpr int kChunks = kDataChunks % 2 == 0 ? kDataChunks + 1 : kDataChunks;  // odd
  static constexpr int kRowElems = kChunks * 8;
  static_assert(kHeadDim % 8 == 0, "whole 16-byte chunks");

  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>((row * kChunks + chunk) * 16);
  }
};

}  // namespace fastattn::cuda
