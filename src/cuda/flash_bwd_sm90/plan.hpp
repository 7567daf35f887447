// plan.hpp — the sm90 (Hopper) backward's tiles, which calls it serves, and the one function
// that chooses between it and the sm80 backward on an sm90 device. Host-only, no CUDA headers
// (the dispatcher, cuda_backward.cu and the CPU unit tests include it); traits.cuh builds the
// kernel's constants from these values.
//
// GPU tests pass on the H200 (tests/gpu_sm90_backward_test.cpp, 6/6, 2026-12-01:
// bench/results/nvidia-h200-final-2026-12-01). Which backward an sm90 device runs by default is
// kSm90BackwardDefault below: sm90 since tools/dev/gpu-sm90-bwd.sh measured it faster than the
// sm80 backward on the H200; FASTATTN_CUDA_BWD_SM90=0 runs the sm80 backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/environment.hpp"
#include "common/problem.hpp"
#include "cuda/common/scratch_align.hpp"
#include "cuda/flash_bwd/plan.hpp"
#include "cuda/flash_bwd_sm90/layout.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"
#include "cuda/forward_path.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// A CTA owns block_n keys of one (batch, KV head) and walks block_m-row query blocks of every
// query head sharing that KV head: one producer warpgroup, two MMA warpgroups of 64 keys each
// (dK and dV of their keys in registers across the whole walk), a `stages`-deep (Q, dO, lse, D)
// ring. FlashAttention-3's d = 128 backward tile is 64 x 128 causal (80 x 128 otherwise, which
// needs wgmma n80). d = 64 takes the same 64 x 128: with 128 query rows S^T and dP^T alone are
// 128 registers a thread and ptxas spilled 260-380 bytes (FA3's d = 64 tile, 128 x 128, computes
// S rather than S^T and stages P in shared memory). First shapes; to be tuned on the H200.
//
// d = 256: dK and dV of 64 keys x 256 columns would be 256 registers a thread, so its CTA owns
// 64 keys and the two MMA warpgroups split dK's and dV's columns instead of the keys
// (`columns`): both compute S^T and dP^T of the same 64 keys (7 instead of 5 GEMM units a step:
// the price of keeping P^T and dS^T in registers; FA3's d = 256 backward, 64 x 64 too, stages
// P and dS in shared memory instead), each accumulates 64 keys x 128 columns of dK and dV
// (128 registers, as at d = 128) and dQ's 128 columns of its half. Written without a GPU.
enum class Sm90BwdWarpgroupSplit {
  keys,     // each MMA warpgroup owns 64 of the block's keys, every column of their dK and dV
  columns,  // both see the same 64 keys; each owns half of dK's and dV's columns
};
struct Sm90BackwardBlocks {
  int block_m, block_n, stages, threads;
  Sm90BwdWarpgroupSplit split = Sm90BwdWarpgroupSplit::keys;
};
// The head dims the sm90 backward serves: the one list that routes a head dim to it (a call of
// another head dim runs the sm80 backward, and the reason says so). 96 and 256 passed their
// float64 and bitwise tests on the H200 (CudaSm90BackwardHeadDim96/256, seventeenth session)
// but have not been timed: dropping one from this list sends it back to
// the sm80 backward (its units stay built).
//
// d = 96 runs d = 128's tile on columns padded to 128 in shared memory: the second 64-column
// TMA box of each row reads columns 64..95 and fills 96..127 with zeros (the tensor map's
// innermost extent is 96), S^T and dP^T run 6 k16 steps, dV/dK/dQ run at n = 128 / 64 whose
// extra columns are exact zeros and are not written (dK, dV, the dQ adds skip columns >= 96).
// A quarter of the dV/dK/dQ work is on padding: the price of no n96 / n48 wgmma shapes (an n48
// dQ half would start mid-panel at column 48, which the MN-major 128-byte swizzle cannot).
inline constexpr std::int64_t kSm90BackwardHeadDims[] = {64, 96, 128, 256};
constexpr bool sm90_backward_has_head_dim(std::int64_t head_dim) {
  for (const std::int64_t d : kSm90BackwardHeadDims) {
    if (d == head_dim) return true;
  }
  return false;
}
inline std::string sm90_backward_head_dims_text() {
  std::string text;
  for (const std::int64_t d : kSm90BackwardHeadDims) text += (text.empty() ? "" : ", ") + std::to_string(d);
  return text;
}
// Columns of a (rows, head_dim) tile in shared memory: whole 64-column swizzle panels.
constexpr std::int64_t sm90_backward_smem_columns(std::int64_t head_dim) { return (head_dim + 63) / 64 * 64; }
constexpr Sm90BackwardBlocks sm90_backward_blocks(std::int64_t head_dim) {
  return head_dim <= 64    ? Sm90BackwardBlocks{64, 128, 2, 384}
         : head_dim <= 128 ? Sm90BackwardBlocks{64, 128, 2, 384}
                           : Sm90BackwardBlocks{64, 64, 2, 384, Sm90BwdWarpgroupSplit::columns};
}
// Whether the bulk reduce-add's fp32 dQ tile fits beside the other tiles: at d = 256 K, V, two
// stages of Q and dO and the dS^T buffers take 208 KiB, and the 64 KiB dQ tile would pass the
// 227 KiB limit, so d = 256 adds dQ with atomics only.
constexpr bool sm90_backward_bulk_dq_fits(std::int64_t head_dim) { return head_dim <= 128; }
// sdQ buffers per MMA warpgroup in bulk dQ mode with the dQ writer (FASTATTN_SM90_BWD_DQ_BUFFERS,
// a build knob for an A/B: 1, the default, or 2, a second buffer at d = 64). With one, a
// warpgroup stores step i's tile only after the writer has taken step i - 1's (dq_empty), so a
// writer that waits for its turn holds the MMA warpgroups within a step of it; with two, within
// two steps. Why: deterministic calls at d = 64 without a mask wait there (ncu, twenty-fifth
// session, docs/cuda-sm90-backward-dq.md "Two dQ writers"). d = 64 has the shared memory (about
// 115 KiB with one buffer); d = 128 would pass 227 KiB. Not yet timed: the default stays 1.
// Every d = 64 kernel reserves the second buffer, the atomic ones too (131 KiB instead of 115):
// an A/B must compare their times as well, not only bulk dQ's.
#ifndef FASTATTN_SM90_BWD_DQ_BUFFERS
#define FASTATTN_SM90_BWD_DQ_BUFFERS 1
#endif
static_assert(FASTATTN_SM90_BWD_DQ_BUFFERS == 1 || FASTATTN_SM90_BWD_DQ_BUFFERS == 2,
              "FASTATTN_SM90_BWD_DQ_BUFFERS: 1 or 2");
constexpr int sm90_backward_dq_buffers(std::int64_t head_dim) {
  return FASTATTN_SM90_BWD_DQ_BUFFERS == 2 && head_dim == 64 ? 2 : 1;  // with the dQ writer only (dq_writer.cuh)
}
// Bytes of one MMA warpgroup's fp32 dQ tile (64 query rows x its half of the columns, in
// accumulator order: layout.hpp's dq_tile_index), the unit of one bulk reduce-add. d = 96: the
// padded columns too (warpgroup 1's tile holds 32 zero columns), so both halves are alike.
constexpr int sm90_backward_dq_tile_bytes(std::int64_t head_dim) {
  return static_cast<int>(64 * sm90_backward_smem_columns(head_dim) / 2 * 4);
}

// Shared memory, bytes (traits.cuh's map, which static_asserts the same): K, V; stages x (Q,
// dO); two dS^T buffers (keys x queries, 16-bit); the two fp32 dQ tiles of the bulk
// reduce-add (times sm90_backward_dq_buffers); stages x (lse, D); 1 KiB of barriers; 1 KiB of
// slack to align the base to the 1024-byte swizzle atom.
constexpr int sm90_backward_smem_bytes(const Sm90BackwardBlocks& b, std::int64_t head_dim, int dq_buffers) {
  const std::int64_t cols = sm90_backward_smem_columns(head_dim);
  return static_cast<int>(2 * b.block_n * cols * 2 + 2 * b.stages * b.block_m * cols * 2 +
                          2 * b.block_n * b.block_m * 2 +
                          (sm90_backward_bulk_dq_fits(head_dim) ? 2 * sm90_backward_dq_tile_bytes(head_dim) * dq_buffers
                                                                : 0) +
                          2 * b.stages * b.block_m * 4) +
         2048;
}
constexpr int sm90_backward_smem_bytes(const Sm90BackwardBlocks& b, std::int64_t head_dim) {
  return sm90_backward_smem_bytes(b, head_dim, sm90_backward_dq_buffers(head_dim));
}
// The second sdQ buffer at d = 64 fits whatever the knob says (with the 1 KiB of static shared
// memory the kernel adds), and at d = 128 it would not (why it is d = 64 only).
static_assert(sm90_backward_smem_bytes(sm90_backward_blocks(64), 64, 2) + 1024 <= 227 * 1024, "d = 64, 2 sdQ buffers");
static_assert(sm90_backward_smem_bytes(sm90_backward_blocks(128), 128, 2) + 1024 > 227 * 1024, "d = 128, 2 sdQ buffers");

// How dQ partial sums (dS K of one query block, fp32) reach the global accumulator:
//   atomic        each MMA thread adds its accumulator registers with red.global.add.v2.f32
//                 to dq_accum[total_q][heads][head_dim] (a warp's adds: 8 rows x 32 bytes).
//   atomic_tiles  each MMA thread adds them with red.global.add.v4.f32 to a tile-ordered
//                 accumulator, [tile row][heads][warpgroup][64 x n in accumulator order]
//                 (layout.hpp: dq_tile_index, dq_first_tile_row): a warp's adds of one n8
//                 slice are 512 contiguous bytes, half the instructions of `atomic`.
//   bulk          each MMA warpgroup stores its tile in shared memory in accumulator order and
//                 the whole tile is added to the same tile-ordered accumulator with one
//                 cp.reduce.async.bulk (the TMA unit's reduce-add; FlashAttention-3's dQ path),
//                 issued by the dQ writer warp (kSm90BwdDqWriter below, the default) or, in
//                 builds without it, by one thread of the warpgroup. The first version added
//                 row by row into the [total_q][heads][head_dim] accumulator, 128 bulk copies
//                 of 128-256 bytes a step, and measured 0.70x the atomic dQ (docs/cuda-sm90-backward.md).
// The two tile-ordered modes have their own convert kernel (dq_convert.cuh). bulk needs shared
// memory for the tiles (not at d = 256, which then adds with `atomic`).
// FASTATTN_CUDA_SM90_BWD_DQ=atomic|atomic_tiles|bulk forces one; unset, sm90_dq_default below
// decides. Measured on the H200 (2026-12-05, thirteenth session, one job, bf16, beside cuDNN;
// bench/results/nvidia-h200-session13-2026-12-05), backward alone, geomean over issue 16's 27
// rows of the speed against cuDNN, with FA3's step order (sm90_bwd_dk_last): atomic 0.711x,
// atomic_tiles 0.787x, bulk 0.771x. Per row, bulk beat atomic_tiles on every d = 128 row without
// a mask (s512-s16k, 0.834-0.915x against 0.793-0.868x) and atomic_tiles won or tied the
// others (d = 64 by 5-10%; causal d = 128 by 0-6%). d = 96 and 256 were neither timed nor
// tested on the GPU in the tile modes, so they keep atomic until they are. Deterministic calls
// followed the same rule until the eighteenth session (timed in the seventeenth: 0.558-0.645x
// the default's speed; docs/cuda-sm90-backward.md "Deterministic"); with the dQ writer warp they take bulk at
// d = 64 / 128 (below). The rule
// was derived on the build that recomputes the CTA's work each step; with the work in shared
// memory (work_slot.cuh) forced bulk gains some causal rows too (docs/cuda-sm90-backward.md).
// Since the twenty-sixth session d = 128 takes bulk for causal calls too (a right bound of 0 and
// no left bound; not for other windows, which no run timed; varlen calls as padded ones): on an
// H100 with the dQ writer warp and the work in shared memory, bulk in the plan's own order ran
// issue 16's seven d = 128 causal rows at s >= 2k at 0.993-1.069x atomic_tiles' speed, backward
// alone (geomean 1.034x; s512 / s1k 0.988x / 1.002x; bench/results/nvidia-h100-session26-2026-12-06,
// call 2), and in the twenty-fourth session's call 5 (longest first for every call) at
// 1.046-1.160x on the s >= 8k and GQA rows. Not yet run on the H200.
enum class Sm90DqReduction : int { atomic = 0, bulk = 1, atomic_tiles = 2 };  // BackwardPlan::sm90_dq
// The dQ writer warp (FASTATTN_SM90_BWD_DQ_WRITER, default 1; 0 builds the old path for an
// A/B): in bulk mode lane 0 of the producer warpgroup's warp 1 (and in deterministic kernels of
// more warps, sm90_dq_writers below) issues the bulk reduce-adds, so
// the MMA warpgroups only store their tile in shared memory and go on; in deterministic mode
// the writer also waits for the turn and counts the adds, which takes the semaphore's round
// trips off the MMA warpgroups' steps (FlashAttention-3's dQ writer; dq_writer.cuh). With the
// writer built, deterministic calls at d = 64 / 128 default to bulk. Measured on an H100 (2026-12-05,
// eighteenth session, the two builds in one job, twice, cuda_bench determinism's 4 shapes): the
// deterministic backward's time 0.79-0.84x the old build's (0.449-0.631x -> 0.575-0.763x the
// speed of the non-deterministic default in the first job; the old build ran 3 of the 4 shapes
// in atomic_tiles mode, so that mixes the mode with the writer; at d = 128 without a mask, bulk
// in both, 0.575x -> 0.687x); bulk dQ outside deterministic mode unchanged (issue 16's 27 rows,
// geomean 0.994x).
// The knob is read by host code too (plan_backward_sm90, describe_backward_sm90): an A/B build
// sets it for the C++ and the CUDA units alike (tools/dev/lib.sh build_variant does).
#ifndef FASTATTN_SM90_BWD_DQ_WRITER
#define FASTATTN_SM90_BWD_DQ_WRITER 1
#endif
constexpr bool kSm90BwdDqWriter = FASTATTN_SM90_BWD_DQ_WRITER != 0;
// Deterministic kernels' dQ writers (FASTATTN_SM90_BWD_DQ_WRITERS, a build knob: 1, 2 or 3):
// with several, lane 0 of producer warps 1, 2, ... take steps in turn, so one waits for its adds
// to be performed and for its next turn while the others issue (dq_writer.cuh: run_dq_writer,
// why). Non-deterministic kernels have one: they wait for neither. Measured on an H100
// (2026-12-06, twenty-fifth session, cuda_bench determinism's 4 shapes, each build against its
// own default, docs/cuda-sm90-backward-dq.md "Two dQ writers"): one writer 0.570-0.760x the
// default's speed, two 0.733-1.089x (the deterministic time 1.31x shorter), three the same as two.
// Read by host code too (describe_backward_sm90): an A/B build sets it for the C++ and CUDA units.
#ifndef FASTATTN_SM90_BWD_DQ_WRITERS
#define FASTATTN_SM90_BWD_DQ_WRITERS 2
#endif
static_assert(FASTATTN_SM90_BWD_DQ_WRITERS >= 1 && FASTATTN_SM90_BWD_DQ_WRITERS <= 3,
              "FASTATTN_SM90_BWD_DQ_WRITERS: 1, 2 or 3");
constexpr int sm90_dq_writers(bool deterministic) { return deterministic ? FASTATTN_SM90_BWD_DQ_WRITERS : 1; }
// causal_or_none: no mask, or causal (window_left < 0, window_right 0) in either alignment.
constexpr Sm90DqReduction sm90_dq_default(std::int64_t head_dim, bool causal_or_none, bool deterministic = false) {
  if (head_dim != 64 && head_dim != 128) return Sm90DqReduction::atomic;
  if (deterministic && kSm90BwdDqWriter) return Sm90DqReduction::bulk;
  return head_dim == 128 && causal_or_none ? Sm90DqReduction::bulk : Sm90DqReduction::atomic_tiles;
}
constexpr const char* kSm90BwdDqEnv = "FASTATTN_CUDA_SM90_BWD_DQ";
// The mode FASTATTN_CUDA_SM90_BWD_DQ forces, or `by_default` (sm90_dq_default) when it is unset.
inline Sm90DqReduction sm90_dq_reduction(Sm90DqReduction by_default) {
  return env_choice<Sm90DqReduction>(EnvVar::cuda_sm90_bwd_dq,
                                     {{"atomic", Sm90DqReduction::atomic},
                                      {"atomic_tiles", Sm90DqReduction::atomic_tiles},
                                      {"bulk", Sm90DqReduction::bulk}},
                                     by_default);
}
// Whether FASTATTN_CUDA_SM90_BWD_DQ asks for bulk (sm90_dq_default never picks it where it cannot run).
inline bool sm90_dq_bulk_forced() { return sm90_dq_reduction(Sm90DqReduction::atomic) == Sm90DqReduction::bulk; }
// Whether the mode adds into the tile-ordered accumulator (and converts it with dq_convert.cuh).
constexpr bool sm90_dq_in_tiles(Sm90DqReduction r) { return r != Sm90DqReduction::atomic; }

// Varlen batches (cu_seqlens): the sm90 backward serves them (Sm90VarlenTraits kernels, one per
// padded kernel; CudaSm90Backward.Varlen* pass on the H200), or `sm80` sends them back to the
// sm80 backward with a reason: the one value to change if the device tests fail.
enum class Sm90BackwardVarlen { sm80, sm90 };
constexpr Sm90BackwardVarlen kSm90BackwardVarlen = Sm90BackwardVarlen::sm90;

// The backward an sm90 device runs when FASTATTN_CUDA_BWD_SM90 is unset: the one value that
// changes once tools/dev/gpu-sm90-bwd.sh has measured the sm90 backward against the sm80 one
// and cuDNN on the H200 in one job (its summary: sm90_bwd_summary.json). The reasons below
// follow it.
enum class Sm90BackwardDefault { sm80, sm90 };
constexpr Sm90BackwardDefault kSm90BackwardDefault = Sm90BackwardDefault::sm90;

// FASTATTN_CUDA_BWD_SM90: 1 the sm90 backward, 0 the sm80 backward, unset: kSm90BackwardDefault.
// `by_env` says whether the variable decided (for the reason text).
constexpr const char* kSm90BwdEnv = "FASTATTN_CUDA_BWD_SM90";
struct Sm90BackwardSwitch {
  bool on = false;
  bool by_env = false;
};
inline Sm90BackwardSwitch sm90_backward_switch() {
  const bool by_env = env_value(EnvVar::cuda_bwd_sm90) != nullptr;
  return {env_switch(EnvVar::cuda_bwd_sm90, "1", "0", kSm90BackwardDefault == Sm90BackwardDefault::sm90), by_env};
}
inline bool sm90_backward_opted_in() { return sm90_backward_switch().on; }

// The order of the CTAs' tiles (tile_scheduler.hpp): longest first. A key block's work is the
// number of query rows that see one of its keys (times the group size, the same for all); under
// a band mask it rises, stays flat, then falls with the key block index (the query interval
// [k0 - offset - right, k1 - 1 - offset + left] clamped to [0, seqlen_q)). Right-bounded masks
// (causal, either alignment, any seqlen_q / seqlen_k): non-increasing, so ascending key blocks
// is exactly longest first; left-bounded only: non-decreasing, descending. Two-sided windows:
// the end whose clamp cuts less goes first. Where the first and last key block weigh the same
// (no mask, or one key block), the (batch, head)-major order keeps one head's Q and dO hot in L2
// for its key blocks. Non-deterministic calls with a right bound only (causal) and more
// than kSm90GroupedPairs (batch, KV head) pairs run longest first within groups of that many
// pairs (sm90_tile_group below): longest first over all pairs runs key block n of every pair at
// once, so each resident CTA streams another head's Q and dO from memory. Measured on an H100
// (twenty-fourth session, bf16, issue 16's causal rows, the plan's dQ modes, two rounds each of
// groups of 1, 2, 4, 8 and 16 pairs and of groups sized to hold their Q, dO and fp32 dQ in
// 32 MiB, against the order before: head-major from 128 pairs, else longest first): groups of
// 4 gained 1.10-1.23x on the two 64-pair rows (b2 h32 s8k d64, b4 h16 s4k d128; every size
// 1.06x or more there), moved the 32-pair s4k-8k rows by -2%..+6%, stayed within 3% of
// head-major on the rows of 128+ pairs, and within -11%..+6% on the few-pair s8k-16k rows (GQA
// 32/8, MHA s16k), where the other sizes moved some row by 8-21% in that run (not all of it
// reproduced in later calls: identical plans timed twice in one call read up to 25% apart on a
// single forward+backward row). Groups of 4 had the best forward+backward geometric mean
// (1.017/1.019 against the order before, min 0.975/0.981). Sliding windows and left-bounded
// windows keep longest first (not measured). Varlen calls take the groups too since the
// twenty-eighth session (their grid: the longest sequence's key blocks for every pair).
// Deterministic mode orders by its dQ adds instead (tile_scheduler.hpp): a key block may wait
// only for key blocks launched before it. Every mask launches ascending key blocks, within
// groups of kSm90GroupedPairs (batch, KV head) pairs for calls of more pairs
// (sm90_tile_group below; longest first for a right bound, as above). Each key block runs about
// a step behind the one before it on their shared query blocks where they are resident together
// (head-major, the order of calls without a mask before the fifteenth session: key block n of a
// head started about n steps late). Across all pairs (the order from the fifteenth session to
// the twenty-sixth) only a few of a pair's key blocks are resident at once (about the SMs / the
// pairs), so little of that wait; but the CTAs resident at once read every pair's Q, dO and fp32
// dQ, from memory once those pass L2 (4 MiB a pair at d = 128, s4k; 2 MiB at d = 64). Groups of 4
// pairs bring the wait back (at s4k all 32 of a pair's key blocks are resident: the step model,
// which has no L2, ends causal grids 1-17% and unmasked ones up to 8% later in groups of 4) and
// keep the group's bytes in L2, which on the GPU is worth far more. Measured on an H100
// (twenty-sixth session, cuda_bench determinism, two alternating rounds, one job): against one
// group of all pairs, groups of 4 took 0.78x the time on the bar shapes' d = 64 row (b2 h32 s4k:
// 1.81 against 2.33 ms; the non-deterministic default's 1.74-1.75 ms), 0.94x on d = 128 (b2
// h16), 0.98x causal, 0.52-0.59x at b4 / b8 d = 64 and b8 d = 128 and 0.75-0.77x at b4 d = 128
// (--det-shapes pairs: b8 h16 d128 5.45-5.50 against 10.56 ms, the default's 5.39-5.66), but
// 1.03-1.04x at b1 h16 d128 (16 pairs); groups of 8 within 3.5% of 4 either way, of 16 up to
// 1.18x slower than 4 at d = 64.
// FASTATTN_CUDA_SM90_BWD_ORDER=longest_first runs one group (the order before, for the A/B).
// FASTATTN_CUDA_SM90_BWD_ORDER=shortest_first launches right-bounded deterministic
// calls from the last key block instead (FlashAttention-3's order; no key block waits on its
// shared query blocks, but the longest run last): an A/B, off by default, because the step
// model (cuda_sm90_backward_schedule_test.cpp) finishes multi-head causal grids later that way.
enum class Sm90TileOrder : int { head_major = 0, key_block_ascending = 1, key_block_descending = 2 };

// Query rows that see a key of key block n (tile_scheduler.hpp's sm90_query_blocks in rows;
// the CPU test checks the two agree). window_left / window_right < 0: unbounded.
struct Sm90MaskShape {
  std::int64_t window_left = -1, window_right = -1;
  bool bottom_right = true;
  std::int64_t seqlen_q = 0, seqlen_k = 0;
};
constexpr std::int64_t sm90_key_block_rows(const Sm90MaskShape& m, std::int64_t n, std::int64_t block_n) {
  const std::int64_t offset = m.bottom_right ? m.seqlen_k - m.seqlen_q : 0;
  const std::int64_t k0 = n * block_n, k1 = k0 + block_n < m.seqlen_k ? k0 + block_n : m.seqlen_k;
  if (k0 >= k1) return 0;
  // Compared as window < bound, so that windows near INT64_MAX (unbounded in effect) cannot overflow.
  std::int64_t q_begin = 0, q_end = m.seqlen_q;
  if (m.window_right >= 0 && m.window_right < k0 - offset) q_begin = k0 - offset - m.window_right;
  if (m.window_left >= 0 && m.window_left < q_end - k1 + offset) q_end = k1 - offset + m.window_left;
  return q_end > q_begin ? q_end - q_begin : 0;
}
// FASTATTN_CUDA_SM90_BWD_ORDER: unset, the order below; longest_first, the order below in one
// group of all pairs (no groups: the A/B of the grouped order); head_major turns longest first
// off ((batch, KV head)-major for every call: the A/B measurement of the order, and in
// deterministic mode the order calls without a mask took before the fifteenth session);
// shortest_first, the default order except right-bounded deterministic calls (above); grouped,
// the groups for every longest-first call, windows included (an A/B).
constexpr const char* kSm90BwdOrderEnv = "FASTATTN_CUDA_SM90_BWD_ORDER";
enum class Sm90OrderSwitch { automatic, longest_first, head_major, shortest_first, grouped };
inline Sm90OrderSwitch sm90_order_switch() {
  return env_choice<Sm90OrderSwitch>(EnvVar::cuda_sm90_bwd_order,
                                     {{"longest_first", Sm90OrderSwitch::longest_first},
                                      {"head_major", Sm90OrderSwitch::head_major},
                                      {"shortest_first", Sm90OrderSwitch::shortest_first},
                                      {"grouped", Sm90OrderSwitch::grouped}},
                                     Sm90OrderSwitch::automatic);
}
// Pairs per group of the grouped order (above; FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS sets another
// count for A/Bs).
inline constexpr std::int64_t kSm90GroupedPairs = 4;
// FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS (a positive integer), or kSm90GroupedPairs when unset or empty.
inline std::int64_t sm90_group_pairs() {
  return env_integer(EnvVar::cuda_sm90_bwd_group_pairs, 1, std::int64_t{1} << 30, kSm90GroupedPairs);
}
constexpr Sm90TileOrder sm90_tile_order(const Sm90MaskShape& m, std::int64_t block_n, bool deterministic,
                                        bool shortest_first = false) {
  const std::int64_t n_blocks = (m.seqlen_k + block_n - 1) / block_n;
  if (n_blocks <= 1) return Sm90TileOrder::head_major;
  if (deterministic) {
    return shortest_first && m.window_right >= 0 ? Sm90TileOrder::key_block_descending
                                                 : Sm90TileOrder::key_block_ascending;
  }
  const std::int64_t first = sm90_key_block_rows(m, 0, block_n), last = sm90_key_block_rows(m, n_blocks - 1, block_n);
  if (first > last) return Sm90TileOrder::key_block_ascending;
  if (last > first) return Sm90TileOrder::key_block_descending;
  return Sm90TileOrder::head_major;
}
// The pairs per group of a call's longest-first order (above), 0 for one group of all:
// deterministic calls with any mask or none (within a group a key block is still launched after
// the key blocks ranked before it, tile_scheduler.hpp), non-deterministic ones with a right
// bound only, or under FASTATTN_CUDA_SM90_BWD_ORDER=grouped with any mask (an A/B; calls without
// a mask are head-major); longest_first: one group always (head_major has no groups).
// pairs: batch * num_kv_heads (a tile's CTA serves a KV head's whole group of query heads).
// Varlen calls too, since the twenty-eighth session: one group of all pairs made a varlen batch's
// deterministic backward 0.54-0.58x the default's speed at 128-256 pairs (H100,
// bench/results/nvidia-h100-session28-2026-12-06), as padded calls were before their groups.
constexpr std::int64_t sm90_tile_group(const Sm90MaskShape& m, Sm90TileOrder order, Sm90OrderSwitch order_switch,
                                       bool deterministic, std::int64_t pairs, std::int64_t group_pairs) {
  if (order == Sm90TileOrder::head_major || group_pairs >= pairs) return 0;
  if (order_switch == Sm90OrderSwitch::longest_first) return 0;
  if (deterministic || order_switch == Sm90OrderSwitch::grouped) return group_pairs;
  return m.window_right >= 0 && m.window_left < 0 ? group_pairs : 0;  // automatic, shortest_first
}

// What the choice depends on.
struct Sm90BackwardShape {
  bool device_path_sm90 = false;  // the device's forward path is sm90 (forward_path.hpp)
  bool opted_in = false;          // sm90_backward_switch().on (FASTATTN_CUDA_BWD_SM90 or the default)
  bool switch_by_env = false;     // FASTATTN_CUDA_BWD_SM90 is set (else kSm90BackwardDefault decided)
  std::int64_t head_dim = 0;
  std::int64_t batch = 0, num_heads = 0, num_kv_heads = 0;
  std::int64_t seqlen_q = 0, seqlen_k = 0;
  bool varlen = false;
  bool tma_describes = true;  // q, k, v, dout: layouts TMA can load (flash_fwd_sm90/plan.hpp)
};

// Which backward an sm90 device runs for a call, and why: sm90 when `reason` is empty, else
// the sm80 backward, and `reason` names the first condition that sent it there.
struct Sm90BackwardChoice {
  bool sm90 = false;
  std::string reason;
};
inline Sm90BackwardChoice choose_sm90_backward(const Sm90BackwardShape& s) {
  auto sm80 = [](std::string why) { return Sm90BackwardChoice{false, std::move(why)}; };
  if (!s.device_path_sm90) return sm80("the device's path is not sm90");
  if (!s.opted_in) {
    if (s.switch_by_env) return sm80(std::string(kSm90BwdEnv) + "=0 forces the sm80 backward");
    return sm80(std::string("the sm90 backward is opt-in until its speed is measured on the H200 (") + kSm90BwdEnv +
                "=1)");
  }
  if (!sm90_backward_has_head_dim(s.head_dim)) {
    return sm80("no sm90 backward for head_dim " + std::to_string(s.head_dim) + " (sm90 has " +
                sm90_backward_head_dims_text() + ")");
  }
  if (s.varlen && kSm90BackwardVarlen == Sm90BackwardVarlen::sm80) {
    return sm80("varlen batches run the sm80 backward (kSm90BackwardVarlen)");
  }
  if (!s.tma_describes) {
    return sm80("a q/k/v/dout layout TMA cannot load (base or a stride not a multiple of 16 bytes, or a stride of 0)");
  }
  if (s.seqlen_q == 0 || s.seqlen_k == 0) return sm80("an empty sequence");
  const Sm90BackwardBlocks b = sm90_backward_blocks(s.head_dim);
  const std::int64_t tiles = (s.seqlen_k + b.block_n - 1) / b.block_n * s.num_kv_heads * s.batch;
  if (tiles > (std::int64_t{1} << 31) - 1) return sm80("more key-block tiles than a 1-D grid holds");
  return {true, {}};
}

// q, k, v and dout (the operands the sm90 backward loads by TMA). Varlen: [total tokens,
// heads, d] tensors, described as one batch of total tokens.
inline bool sm90_backward_tma_describes(const AttentionProblem& p) {
  if (p.is_varlen()) {
    return sm90_tma_describes(p.q, 1, p.total_q, p.num_heads) &&
           sm90_tma_describes(p.k, 1, p.total_k, p.num_kv_heads) &&
           sm90_tma_describes(p.v, 1, p.total_k, p.num_kv_heads) && sm90_tma_describes(p.dout, 1, p.total_q, p.num_heads);
  }
  return sm90_tma_describes(p) && sm90_tma_describes(p.dout, p.batch, p.seqlen_q, p.num_heads);
}

// The plan of an sm90 backward call: one dQ accumulator (deterministic mode orders the adds
// with semaphores instead of splitting into buffers), then in deterministic mode one int
// semaphore per (batch, head, query block), zeroed with the accumulator. total_q_tokens: varlen
// batches' query tokens (their mask shape holds the longest sequence); < 0: batch * seqlen_q.
inline BackwardPlan plan_backward_sm90(std::int64_t head_dim, std::int64_t batch, std::int64_t num_heads,
                                       std::int64_t num_kv_heads, const Sm90MaskShape& mask, bool deterministic,
                                       std::int64_t total_q_tokens = -1) {
  const std::int64_t seqlen_q = mask.seqlen_q;
  const Sm90BackwardBlocks b = sm90_backward_blocks(head_dim);
  BackwardPlan plan;
  plan.path = ForwardPath::sm90;
  plan.blocks = BackwardBlocks{b.block_m, b.block_n, b.threads / 32, 0, 0, 0, b.stages, false};
  plan.num_splits = 1;
  const bool causal_or_none = mask.window_left < 0 && mask.window_right <= 0;
  Sm90DqReduction dq = sm90_dq_reduction(sm90_dq_default(head_dim, causal_or_none, deterministic));
  if (dq == Sm90DqReduction::bulk && !sm90_backward_bulk_dq_fits(head_dim)) dq = Sm90DqReduction::atomic;
  plan.sm90_dq = static_cast<int>(dq);
  plan.sm90_warpgroup_split = b.split == Sm90BwdWarpgroupSplit::columns ? 1 : 0;
  const Sm90OrderSwitch order = sm90_order_switch();
  const Sm90TileOrder tile_order =
      order == Sm90OrderSwitch::head_major
          ? Sm90TileOrder::head_major
          : sm90_tile_order(mask, b.block_n, deterministic, order == Sm90OrderSwitch::shortest_first);
  plan.sm90_tile_order = static_cast<int>(tile_order);
  plan.sm90_tile_group =
      static_cast<int>(sm90_tile_group(mask, tile_order, order, deterministic, batch * num_kv_heads, sm90_group_pairs()));
  const bool varlen = total_q_tokens >= 0;
  const std::int64_t total_q = varlen ? total_q_tokens : batch * seqlen_q;
  plan.d_sum_bytes = scratch_align(static_cast<std::size_t>(num_heads * total_q) * sizeof(float));
  // atomic: [total_q][heads][head_dim]; the tile modes: tile rows of [heads][2 warpgroup tiles].
  const std::int64_t dq_floats =
      sm90_dq_in_tiles(dq) ? sm90_layout::dq_tile_rows(varlen, batch, total_q, seqlen_q, b.block_m) * num_heads * 2 *
                              (sm90_backward_dq_tile_bytes(head_dim) / 4)
                        : total_q * num_heads * head_dim;
  plan.dq_accum_bytes = scratch_align(static_cast<std::size_t>(dq_floats) * sizeof(float));
  if (deterministic) {
    const std::int64_t m_blocks = (seqlen_q + b.block_m - 1) / b.block_m;
    plan.sm90_semaphore_bytes = scratch_align(static_cast<std::size_t>(batch * num_heads * m_blocks) * sizeof(int));
  }
  plan.workspace_bytes = plan.d_sum_bytes + plan.dq_accum_bytes + plan.sm90_semaphore_bytes;
  return plan;
}

// The sm90 plan in words, for KernelChoice::reason.
inline std::string describe_backward_sm90(const BackwardPlan& plan, bool deterministic,
                                          bool switch_by_env = sm90_backward_switch().by_env) {
  const bool ascending = plan.sm90_tile_order == static_cast<int>(Sm90TileOrder::key_block_ascending);
  const bool descending = plan.sm90_tile_order == static_cast<int>(Sm90TileOrder::key_block_descending);
  const char* order = deterministic && descending ? "shortest first (high key blocks first; each query block's dQ "
                                                    "adds from its last key block down)"
                      : deterministic && ascending ? "low key blocks first across heads"
                      : ascending                  ? "longest first (low key blocks first)"
                      : descending                 ? "longest first (high key blocks first)"
                                                   : "(batch, KV head)-major";
  const std::string chosen = switch_by_env ? std::string("chosen by ") + kSm90BwdEnv + "=1"
                             : kSm90BackwardDefault == Sm90BackwardDefault::sm90
                                 ? std::string("the default on sm90 devices; ") + kSm90BwdEnv + "=0 runs the sm80 one"
                                 : std::string("opt-in");
  return std::string("sm90 path (Hopper, ") + chosen + "; GPU tests pass on the H200): K/V-stationary CTAs of " +
         std::to_string(plan.blocks.block_n) + " keys, dK/dV in registers of 2 MMA warpgroups" +
         (plan.sm90_warpgroup_split == 1 ? " (each half of the columns, both computing S^T and dP^T)" : "") +
         " (wgmma: S^T and dP^T SS, P^T dO and dS^T Q RS), " +
         std::to_string(plan.blocks.block_m) + "-row query blocks by TMA on a " +
         std::to_string(plan.blocks.stages) + "-stage mbarrier ring, dQ added in fp32 by " +
         (plan.sm90_dq == static_cast<int>(Sm90DqReduction::bulk)
              ? (!kSm90BwdDqWriter ? "one TMA bulk reduce-add per warpgroup tile"
                 : sm90_dq_writers(deterministic) > 1
                     ? "one TMA bulk reduce-add per warpgroup tile, issued by " +
                           std::to_string(sm90_dq_writers(deterministic)) + " dQ writer warps taking steps in turn"
                     : std::string("one TMA bulk reduce-add per warpgroup tile, issued by a dQ writer warp"))
          : plan.sm90_dq == static_cast<int>(Sm90DqReduction::atomic_tiles) ? "red.global.add.v4 into accumulator-ordered tiles"
                                                                            : "red.global.add.v2 from registers") +
         (plan.sm90_warpgroup_split == 1 && sm90_dq_bulk_forced()
              ? " (bulk asked for: no shared memory for the bulk reduce-add's tile)"
              : "") +
         (deterministic ? " in a fixed key-block order (per (batch, head, query block) semaphores)" : "") + ", tiles " +
         order +
         (plan.sm90_tile_group > 0 ? " within groups of " + std::to_string(plan.sm90_tile_group) +
                                         " (batch, KV head) pairs"
                                   : std::string());
}

}  // namespace fastattn::cuda
