// descriptor.hpp — the 64-bit shared-memory matrix descriptor of wgmma (PTX ISA, "Matrix
// Descriptor"), host and device: its packing, and advancing one by a byte offset. wgmma.cuh
// builds the operands' descriptors with these; tests/cuda_sm90_backward_layout_test.cpp checks
// them on the CPU.
#pragma once

#include <cstdint>

#include "common/mask.hpp"  // FASTATTN_HD

namespace fastattn::cuda::sm90 {

// Descriptor fields: bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45
// stride byte offset >> 4, 49-51 base offset (0: atoms 1024-byte aligned), 62-63 swizzle
// (1 = 128-byte).
FASTATTN_HD constexpr uint64_t smem_descriptor_sw128(uint32_t smem_address, uint32_t leading_bytes,
                                                     uint32_t stride_bytes) {
  return static_cast<uint64_t>((smem_address & 0x3FFFFu) >> 4) |
         (static_cast<uint64_t>((leading_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<uint64_t>((stride_bytes & 0x3FFFFu) >> 4) << 32) | (uint64_t{1} << 62);
}

// The descriptor of the same operand `bytes` further on (a multiple of 16): the start-address
// field plus bytes >> 4, the other fields kept. It equals the descriptor built from the moved
// address while that address stays below 256 KiB, the field's range (shared memory is 228 KiB;
// the CPU test checks the identity), and costs one 32-bit add where building one costs a mask,
// a shift and an or: the backward's step issues 32 wgmma at d = 128, each with one or two
// descriptors.
FASTATTN_HD constexpr uint64_t descriptor_advance(uint64_t desc, uint32_t bytes) {
  return (desc & ~uint64_t{0xFFFFFFFFu}) | static_cast<uint32_t>(static_cast<uint32_t>(desc) + (bytes >> 4));
}

}  // namespace fastattn::cuda::sm90
