// layout.hpp — the index math of the sm90 backward, host and device: where a warpgroup
// thread's wgmma accumulator elements sit, how they pack into register A fragments, where a
// 16-bit element of a 128-byte-swizzled tile lives, and where the wgmma descriptors of each
// k16 step start. The kernel (consumer.cuh, dq_writer.cuh) computes addresses with these
// functions, and tests/cuda_sm90_backward_layout_test.cpp checks them on the CPU (bijections,
// the P^T -> A fragment identity, equality with the TMA swizzle, bank-conflict-free stores).
//
// Sources: PTX ISA, "wgmma.mma_async" register fragments (m64nNk16: thread t of the warpgroup
// holds rows 16 (t / 32) + (t % 32) / 4 and + 8, columns 8i + 2 (t % 4) and + 1 of each n8
// slice i; register A has the mma.m16n8k16 A layout per warp), and "Shared Memory Matrix
// Layout" (128-byte swizzle: 16-byte chunk c of 128-byte row r of a 1024-byte atom stored at
// chunk c ^ (r % 8)). sm90/wgmma.cuh has the descriptors.
#pragma once

#include <cstdint>

#include "common/mask.hpp"  // FASTATTN_HD

namespace fastattn::cuda::sm90_layout {

// ---- wgmma accumulator (m64 x n, f32), thread t in [0, 128), n8 slice `nt`, element e in [0, 4)
FASTATTN_HD constexpr int acc_row(int t, int e) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (e / 2); }
FASTATTN_HD constexpr int acc_col(int t, int nt, int e) { return 8 * nt + 2 * (t % 4) + e % 2; }

// ---- register A fragment of k16 step kp: a[kp][r] (r in [0, 4)) holds two 16-bit halves h.
FASTATTN_HD constexpr int afrag_row(int t, int r) { return 16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2); }
FASTATTN_HD constexpr int afrag_k(int t, int kp, int r, int h) { return 16 * kp + 2 * (t % 4) + 8 * (r / 2) + h; }
// An (m64 x n) accumulator read as the A operand of a GEMM whose k runs along its columns (P^T
// and dS^T feeding dV += P^T dO and dK += dS^T Q): a[kp][r] half h is accumulator slice
// pack_slice(kp, r), element pack_element(r, h).
FASTATTN_HD constexpr int pack_slice(int kp, int r) { return 2 * kp + r / 2; }
FASTATTN_HD constexpr int pack_element(int r, int h) { return 2 * (r % 2) + h; }

// ---- stmatrix.x4 of an A fragment a[kp][0..3] (four 8x8 matrices, matrix q = register r):
// lane l gives the address of row l % 8 of matrix q = l / 8, which is fragment row
// stmatrix_row(t, ...) and starts at k column stmatrix_col(kp, l): the 16-byte row of 8
// 16-bit elements that the lanes 4g..4g+3 of matrix q hold as pairs.
FASTATTN_HD constexpr int stmatrix_row(int t, int lane) { return 16 * (t / 32) + 8 * ((lane / 8) % 2) + lane % 8; }
FASTATTN_HD constexpr int stmatrix_col(int kp, int lane) { return 16 * kp + 8 * (lane / 16); }

// ---- 128-byte swizzled tiles of 16-bit elements: panels of 64 columns (128-byte rows), `rows`
// rows per panel (a multiple of 8, so every panel starts on a 1024-byte atom). Byte offset of
// element (row, col) from the 1024-aligned tile base.
FASTATTN_HD constexpr uint32_t sw128_offset(int rows, int row, int col) {
  return static_cast<uint32_t>((col / 64) * rows * 128 + row * 128 + ((((col % 64) / 8) ^ (row % 8)) * 16) +
                               (col % 8) * 2);
}
// The same as the swizzle function of the hardware (CU_TENSOR_MAP_SWIZZLE_128B / wgmma
// swizzle mode 1): address bits [4, 7) XOR bits [7, 10) of the unswizzled byte offset.
FASTATTN_HD constexpr uint32_t sw128_apply(uint32_t linear) { return linear ^ (((linear >> 7) & 7u) << 4); }

// ---- descriptor start offsets (bytes from the tile base) of k16 step kk
// K-major operand (k contiguous in the 128-byte rows), first row `row0` (a multiple of 8):
// 4 k16 steps per 64-column panel, 32 bytes apart in the unswizzled row.
FASTATTN_HD constexpr uint32_t kmajor_step(int rows, int row0, int kk) {
  return static_cast<uint32_t>((kk / 4) * rows * 128 + row0 * 128 + (kk % 4) * 32);
}
// MN-major operand (m or n contiguous, k along the rows) from m/n index mn0: 16 k rows (two
// 8-row atoms, 2048 bytes) per step; the descriptor's leading byte offset is the panel distance
// rows * 128, the stride byte offset the 8-row atom (1024). An mn0 inside a panel (the d = 64
// dQ's n32 half: mn0 = 32) moves the start 64 bytes into the 128-byte row, below the bits the
// swizzle reads (7-9), as the K-major k16 steps move it 32 bytes.
FASTATTN_HD constexpr uint32_t mnmajor_step(int rows, int mn0, int kk) {
  return static_cast<uint32_t>((mn0 / 64) * rows * 128 + (mn0 % 64) * 2 + kk * 16 * 128);
}

// ---- the fp32 dQ tile of the bulk reduce-add (dq_writer.cuh), in accumulator order: a
// warpgroup's (64 x n) dQ tile is 128 x n / 2 floats, thread t's four elements of n8 slice nt
// at float (nt * 128 + t) * 4 (FlashAttention-3 keeps its dQ accumulator in the same
// thread-value order). A warp's float4 stores of one slice then cover 512 contiguous bytes
// (no bank conflict), the tile is one contiguous block (one cp.reduce.async.bulk), and the
// convert kernel (dq_convert.cuh) maps each float back to its row and column.
FASTATTN_HD constexpr int dq_tile_index(int t, int nt, int e) { return (nt * 128 + t) * 4 + e; }
FASTATTN_HD constexpr int dq_tile_row(int index) { return acc_row(index / 4 % 128, index % 4); }
FASTATTN_HD constexpr int dq_tile_col(int index) { return acc_col(index / 4 % 128, index / 512, index % 4); }

// Where a sequence's dQ tiles sit in the bulk reduce-add's accumulator: [tile row][head]
// [warpgroup][128 x n / 2 floats], tile row = the first of the sequence's + query block. Padded
// batches: b * m_blocks. Varlen: q_start / block_m + b (FlashAttention-3's padded offsets): the
// next sequence's first tile row is at least this one's plus ceil(len / block_m), since
// floor((q_start + len) / block_m) - floor(q_start / block_m) + 1 >= ceil(len / block_m); so
// tiles never overlap, and total_q / block_m + batch tile rows hold them all (the CPU test
// checks both over random lengths).
FASTATTN_HD constexpr int64_t dq_first_tile_row(bool varlen, int batch_index, int64_t q_start, int64_t seqlen_q,
                                                int block_m) {
  return varlen ? q_start / block_m + batch_index
                : static_cast<int64_t>(batch_index) * ((seqlen_q + block_m - 1) / block_m);
}
FASTATTN_HD constexpr int64_t dq_tile_rows(bool varlen, int64_t batch, int64_t total_q, int64_t seqlen_q,
                                           int block_m) {
  return varlen ? total_q / block_m + batch : batch * ((seqlen_q + block_m - 1) / block_m);
}

}  // namespace fastattn::cuda::sm90_layout
