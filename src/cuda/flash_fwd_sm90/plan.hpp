// plan.hpp — the sm90 (Hopper) forward's tile shapes and which calls it serves; host-only, no
// CUDA headers (the dispatcher's heuristics, flash_fwd/heuristics.hpp, and the CPU unit tests
// include it). kernel.cuh's traits are built from these values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "common/environment.hpp"
#include "common/problem.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

// A CTA: one producer warpgroup (TMA) and block_m / 64 consumer warpgroups (wgmma, 64 query
// rows each), a `stages`-deep ring of (K, V) tiles of block_n keys.
struct Sm90ForwardBlocks {
  int block_m, block_n, stages, threads;
};

// Head dims with an sm90 kernel (tools/gen_cuda_kernels.py writes their units); the others
// run on the sm80 kernels, and KernelChoice::reason says so.
constexpr bool sm90_has_head_dim(std::int64_t head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

// The head dim as the tiles hold it: whole 64-column panels of the 128-byte swizzle. d = 96 is
// held as 128: TMA fills columns 96..127 of Q, K and V with zeros (out of the tensor's bounds),
// S = Q K^T runs its 6 k16 steps only, O += P V computes 128 columns of which the epilogue
// stores 96. A third of P V's work is spent on the padding; a 64-byte-swizzled half panel would
// avoid it (FA3 runs d = 96 natively), a step for later.
constexpr std::int64_t sm90_tile_head_dim(std::int64_t head_dim) { return (head_dim + 63) / 64 * 64; }

// d = 128 (and 96): 128 x 128 tiles, two consumer warpgroups of 64 rows, a 2-stage (K, V) ring.
// d = 64: 192 x 128, three consumer warpgroups (the GEMMs per softmax are half as long at
// d = 64, so more rows per K/V tile), 3 stages. d = 256: 128 x 80, two consumer warpgroups, 2
// stages: O is 64 x 256 f32 per warpgroup (128 registers a thread), and Q plus two (K, V)
// stages of 80 keys fill 226 KiB of the 227 KiB of shared memory (FA3 uses 128 x 80 at d = 256
// too). First shapes (FA3 uses 192 x 128 at d = 64 and 128 x 176 at d = 128 non-causal:
// docs/cuda-sm90-forward.md); measured in docs/cuda-sm90-forward.md.
// block_n (0: the head dim's default above) selects a wider key tile where one is compiled
// (sm90_wide_block_n below).
// A/B builds (tools/dev/gpu-sm90-ab.sh BUILD_VARIANTS) may set FASTATTN_SM90_D64_BLOCK_M (128:
// two consumer warpgroups at d = 64, with the overlap loop, as cuDNN's d = 64 kernel has) and
// FASTATTN_SM90_D64_STAGES / FASTATTN_SM90_D128_STAGES (the ring's depth) on the compiler line.
#ifndef FASTATTN_SM90_D64_BLOCK_M
#define FASTATTN_SM90_D64_BLOCK_M 192
#endif
#ifndef FASTATTN_SM90_D64_STAGES
#define FASTATTN_SM90_D64_STAGES 3
#endif
#ifndef FASTATTN_SM90_D128_STAGES
#define FASTATTN_SM90_D128_STAGES 2
#endif
// A/B builds may set FASTATTN_SM90_D64_EXP2_POLY=N (N > 0): the d = 64 kernels then compute the
// exponentials of one n8 fragment of S in N (N = 8: 1/8 of them) on the FMA pipe
// (cuda/common/exp2_poly.hpp), since at d = 64 the softmax's MUFU cycles equal the GEMMs'
// tensor-core cycles. 0 (the default): MUFU for all of them. N = 8, timed on an H100
// (2026-12-05, docs/cuda-sm90-forward-measurements.md "The key loop's per-tile work"), gained nothing,
// its degree-3 polynomial moved the lse past the float64 tests' bound, and ncu put the MUFU at 31-41%
// of its peak in the d = 64 kernel: not the limit.
#ifndef FASTATTN_SM90_D64_EXP2_POLY
#define FASTATTN_SM90_D64_EXP2_POLY 0
#endif
// The softmax's row max as a tree (flash_fwd/softmax.cuh: thread_row_max; the same values as
// the chain, a shorter path to the exponentials). A/B builds may set FASTATTN_SM90_ROW_MAX_CHAIN=1
// for the chain (timed on an H100, 2026-12-05: within the rounds' spread of the tree).
#ifndef FASTATTN_SM90_ROW_MAX_CHAIN
#define FASTATTN_SM90_ROW_MAX_CHAIN 0
#endif
constexpr bool kSm90TreeRowMax = !FASTATTN_SM90_ROW_MAX_CHAIN;
// The epilogue's 1 / row sum and log2 of it by the SFU's approximations (flash_fwd/softmax.cuh:
// OnlineSoftmax::finalize<true>); A/B builds may set FASTATTN_SM90_APPROX_FINALIZE=0 for the
// IEEE division and log2f.
#ifndef FASTATTN_SM90_APPROX_FINALIZE
#define FASTATTN_SM90_APPROX_FINALIZE 1
#endif
constexpr bool kSm90ApproxFinalize = FASTATTN_SM90_APPROX_FINALIZE != 0;
// The left half of the first key tile (consumer.cuh, overlap loop, 128-key tiles, two consumer
// warpgroups): under a causal mask whose diagonal runs through a query tile, the first key tile
// visited (the last one) is masked right of the diagonal, and a consumer warpgroup whose 64 rows
// see none of its right 64 keys computes S = Q K^T, the mask and the softmax over the left 64 only
// (wgmma n64, half the exponentials); its P's right half is 0, as the whole tile's would be (the
// same values), and its P V stays the whole tile's (halving it too would put a branch into the key
// loop, which issues tile 0's P V beside tile 1's S). On a square causal call that is warpgroup 0
// on every diagonal tile: a fifth of the warpgroups' key tiles at s512 (4 of 20 per head: a query
// tile of 128 sees 1-4 key tiles), 8 of 72 at s1k, 16 of 272 at s2k, the short causal rows where
// issue 15's bars are missed. On for d <= 64 (the narrow 128 x 128 tile of the causal calls):
// timed on an H100 twice (2026-12-05 and 2026-12-06, twentieth and twenty-third sessions,
// docs/cuda-sm90-forward-measurements.md), the d = 64 causal rows s512-2k ran 0.6-4% faster in all
// five rounds, s4k even; at d = 128 the causal rows went either way (s512 +3% / -3%, s1k -3% in
// two of three rounds), and on the tree with 32-bit positions (thirty-sixth session) s512 causal
// lost 1.6-3.2% in three rounds while s1k gained 0.7-1.4%, so d > 64 keeps the whole tile. The
// H200 has not timed it yet.
// FASTATTN_SM90_LEFT_HALF_FIRST_TILE: -1 (default) d <= 64, 0 off, 1 every head dim it applies to
// (A/B builds).
#ifndef FASTATTN_SM90_LEFT_HALF_FIRST_TILE
#define FASTATTN_SM90_LEFT_HALF_FIRST_TILE -1
#endif
static_assert(FASTATTN_SM90_LEFT_HALF_FIRST_TILE >= -1 && FASTATTN_SM90_LEFT_HALF_FIRST_TILE <= 1,
              "FASTATTN_SM90_LEFT_HALF_FIRST_TILE: -1 (d <= 64), 0 or 1");
constexpr bool sm90_left_half_first_tile(std::int64_t head_dim) {
  return FASTATTN_SM90_LEFT_HALF_FIRST_TILE == 1 || (FASTATTN_SM90_LEFT_HALF_FIRST_TILE == -1 && head_dim <= 64);
}
constexpr int sm90_exp2_poly_every(std::int64_t head_dim) {
  static_assert(FASTATTN_SM90_D64_EXP2_POLY >= 0, "FASTATTN_SM90_D64_EXP2_POLY: 0 or one fragment in N");
  return head_dim <= 64 ? FASTATTN_SM90_D64_EXP2_POLY : 0;
}
// The d = 64 narrow tile (block_m = kSm90D64NarrowBlockM, sm90_d64_narrow_block_m below): 128 x
// 128, two consumer warpgroups with the overlap, 4 stages, the shape of cuDNN's d = 64 kernel.
constexpr int kSm90D64NarrowBlockM = 128;
// The d = 128 short tile (block_m = kSm90D128ShortBlockM, sm90_d128_short_block_m below): 64 x
// 64, one consumer warpgroup with the overlap, 2 stages, two CTAs per SM (sm90_ctas_per_sm).
// Build knob FASTATTN_SM90_D128_SHORT_TILE (default 0: not compiled; 1 for A/B builds).
#ifndef FASTATTN_SM90_D128_SHORT_TILE
#define FASTATTN_SM90_D128_SHORT_TILE 0
#endif
constexpr int kSm90D128ShortBlockM = 64;
constexpr Sm90ForwardBlocks sm90_forward_blocks(std::int64_t head_dim, int block_n = 0, int block_m = 0) {
  constexpr int kD64BlockM = FASTATTN_SM90_D64_BLOCK_M;
  static_assert(kD64BlockM == 128 || kD64BlockM == 192, "d = 64: 2 or 3 consumer warpgroups");
  const Sm90ForwardBlocks b =
      head_dim <= 64 && block_m == kSm90D64NarrowBlockM ? Sm90ForwardBlocks{kSm90D64NarrowBlockM, 128, 4, 384}
      : head_dim > 64 && head_dim <= 128 && block_m == kSm90D128ShortBlockM
          ? Sm90ForwardBlocks{kSm90D128ShortBlockM, 64, 2, 256}
      : head_dim <= 64  ? Sm90ForwardBlocks{kD64BlockM, 128, FASTATTN_SM90_D64_STAGES, 128 + 2 * kD64BlockM}
      : head_dim <= 128 ? Sm90ForwardBlocks{128, 128, FASTATTN_SM90_D128_STAGES, 384}
                        : Sm90ForwardBlocks{128, 80, 2, 384};
  // A wider key tile keeps two stages: three of 176 keys would not fit the shared memory.
  return block_n > 0 && block_n != b.block_n ? Sm90ForwardBlocks{b.block_m, block_n, 2, b.threads} : b;
}

// The wide key tile: 128 x 176 at d = 128 (FA3's non-causal d = 128 shape, hopper/tile_size.h):
// a third fewer key tiles per query tile, so a third less per-tile work (barrier waits, the
// softmax's row reductions, the pipeline's turns) for the same GEMMs, but the last tile of a
// sequence is padded to 176 keys. Q plus two (K, V) stages of 176 keys are 210 KiB of shared
// memory. Served: padded calls at d = 128 with no mask (a causal mask's diagonal tiles are
// partial either way, and FA3 keeps 128 there too), no soft-cap (its wide overlap loop spilled
// 76-84 bytes) and not varlen: no kernel of theirs is compiled. Chosen from kSm90WideMinKeys
// keys (the range where it was measured faster) where the model
//   time ~ key tiles x (block_n + kSm90KeyTileCost)
// says it is at least 1% faster than 128 keys: kSm90KeyTileCost = 16 keys' worth of work per
// tile fits the A/B of 2026-12-02 (docs/cuda-sm90-forward-measurements.md): the wide tile gained
// 0.8-1.7% at s8k-32k and lost 2.4% at s4k (24 tiles of 176 = 4224 keys for 4096), 2-4% at s512/1k.
// Below 8k the model would pick it at many lengths that are not powers of two (e.g. 300 keys: 2 tiles
// of 176 against 3 of 128), none of them measured, so it does not. FASTATTN_CUDA_SM90_BLOCK_N=128 or
// 176 forces one where the wide one is served (A/B measurements).
constexpr int kSm90WideBlockN = 176;
constexpr std::int64_t kSm90KeyTileCost = 16;
constexpr std::int64_t kSm90WideMinKeys = 8192;
constexpr const char* kSm90BlockNEnv = "FASTATTN_CUDA_SM90_BLOCK_N";
constexpr bool sm90_wide_tile_compiled(std::int64_t head_dim) { return head_dim == 128; }
constexpr bool sm90_wide_tile_pays(std::int64_t seqlen_k) {
  const std::int64_t narrow = (seqlen_k + 127) / 128 * (128 + kSm90KeyTileCost);
  const std::int64_t wide = (seqlen_k + kSm90WideBlockN - 1) / kSm90WideBlockN * (kSm90WideBlockN + kSm90KeyTileCost);
  return seqlen_k >= kSm90WideMinKeys && 100 * wide <= 99 * narrow;
}
// The key tile of a call: kSm90WideBlockN, or 0 for the head dim's own.
inline int sm90_wide_block_n(std::int64_t head_dim, std::int64_t seqlen_k, bool masked, bool varlen, bool softcap) {
  // Checked for every call (env_switch throws on a bad value), also those the wide tile does not serve.
  const bool wide = env_switch(EnvVar::cuda_sm90_block_n, "176", "128", sm90_wide_tile_pays(seqlen_k));
  return wide && sm90_wide_tile_compiled(head_dim) && !masked && !varlen && !softcap ? kSm90WideBlockN : 0;
}

// Ordered GEMM issue between the two consumer warpgroups (consumer.cuh): a warpgroup issues its
// S = Q K^T and O += P V only in its turn, handed over by named barriers, so the two do not
// issue at once and one's softmax runs while the other's GEMMs hold the tensor cores (FA3's
// warp scheduler barriers, the "pingpong" of the paper, section 3.1). Overlap kernels only.
// Default: under the persistent scheduler (A/B of 2026-12-02, docs/cuda-sm90-forward-measurements.md:
// persistent with the order 1-12% faster than without on every d128 row, e.g. s4k 0.947x cuDNN
// against 0.869x; under grid it gained at s512-2k but lost 0.5-1.1% from s8k, where grid is the
// default). d = 96 runs the d = 128 kernel on padded tiles and follows its rules; it was not in the
// sweep.
// FASTATTN_CUDA_SM90_WG_ORDER=1 / =0 forces it on / off (A/B measurements).
constexpr const char* kSm90WgOrderEnv = "FASTATTN_CUDA_SM90_WG_ORDER";
inline bool sm90_wg_order(bool persistent) {
  return env_switch(EnvVar::cuda_sm90_wg_order, "1", "0", persistent);
}

// The epilogue's TMA store of O from shared memory (epilogue.cuh), where the tile has room for
// sO (sm90_output_tile_fits) and the call allows it (padded, an out TMA can describe, not the
// dynamic scheduler: heuristics.hpp checks, the launcher follows). FASTATTN_CUDA_SM90_TMA_STORE=0 keeps the stores from the registers
// (A/B measurements).
constexpr const char* kSm90TmaStoreEnv = "FASTATTN_CUDA_SM90_TMA_STORE";
inline bool sm90_tma_store() { return env_switch(EnvVar::cuda_sm90_tma_store, "1", "0", true); }

// The consumer loop's schedule (consumer.cuh): with overlap, tile i's S = Q K^T is issued
// before tile i - 1's O += P V, and the softmax of tile i runs while that P V is on the tensor
// cores (FA3's intra-warpgroup overlap); without, each GEMM is waited for before the softmax.
// Overlap keeps S, P and O live at once: the 240 registers of a 2-consumer-warpgroup tile hold
// them; it is compiled and used for those tiles (d = 96 / 128, d = 64's narrow tile) and for
// d = 256 (below), not for the 3-warpgroup tile (d = 64, 160 registers; below).
// FASTATTN_CUDA_SM90_OVERLAP=0 selects the plain loop there too, for A/B measurements.
constexpr const char* kSm90OverlapEnv = "FASTATTN_CUDA_SM90_OVERLAP";
// d = 256 (O alone is 128 registers a thread): the overlap loop spilled 68-104 bytes until Q's
// 16 descriptors were kept from being hoisted out of the key loop (consumer.cuh issue_qk's
// opaque move, as for the three-warpgroup tile); since the twelfth session its kernels compile
// with 0 bytes of spills (nvcc 13.0, all 12 of the unit; FA3 runs d = 256 on 128 x 80 with the
// overlap too). Measured on the H200 (2026-12-05, thirteenth session, two rounds beside cuDNN
// in one job, bench/results/nvidia-h200-session13-2026-12-05): causal b4 h8 s4k 0.867x -> 0.912x
// cuDNN, s8k 0.938x -> 1.067x, s16k 1.063x -> 1.195x, so it became the default for masked
// calls. Without a mask (2026-12-05, seventeenth session, cuda_bench mode d256, one job,
// bench/results/nvidia-h200-session17-2026-12-05 call 1): b8 h8 s2k 0.897x -> 0.975x cuDNN, s4k
// 0.915x -> 1.007x, s8k 0.857x -> 1.041x, s16k 0.823x -> 1.057x (causal s2k 0.829x -> 0.908x),
// and its float64 tests passed, so it is d = 256's loop for every call.
// FASTATTN_CUDA_SM90_OVERLAP=0 / 1 selects the plain loop / the overlap.
// d = 64's 192-row tile (three consumer warpgroups at 160 registers, FA3's d = 64 shape and loop)
// keeps the plain loop: its overlap loop, an A/B build until the thirty-third session, ran
// 11-14% slower than the plain loop on the H200 (eleventh session) while it spilled the softmax's
// row state, and 10-12% slower on an H100 (thirty-third session) compiled without spills
// (docs/cuda-sm90-forward-measurements-h100.md, "The three-warpgroup overlap loop").
constexpr bool sm90_overlap_fits(std::int64_t head_dim, int block_m = 0) {
  const int m = sm90_forward_blocks(head_dim, 0, block_m).block_m;
  return (head_dim <= 128 && (m == 128 || m == kSm90D128ShortBlockM)) || head_dim == 256;
}
// The overlap loop wherever it is compiled (sm90_overlap_fits), unless
// FASTATTN_CUDA_SM90_OVERLAP=0.
inline bool sm90_overlap(std::int64_t head_dim, int block_m) {
  return env_switch(EnvVar::cuda_sm90_overlap, "1", "0", true) && sm90_overlap_fits(head_dim, block_m);
}

// The d = 64 narrow tile for causal calls (kSm90D64NarrowBlockM), compiled beside the 192-row
// tile for padded calls with a one-sided (causal) mask and no soft-cap (overlap kernels only).
// Default: the calls of at most kSm90D64NarrowMaxKeyTiles key tiles (seqlen_k <= 2048). Measured
// on the H200 (2026-12-04, eleventh session, docs/cuda-sm90-forward-measurements.md "d64 narrow tile
// and wave sections", two rounds beside cuDNN in one job): causal s512 0.704x -> 0.751x cuDNN, s1k
// 0.722x -> 0.785x, s2k 0.801x -> 0.839x, but s4k 0.888x -> 0.853x, s8k 0.995x -> 0.862x, s16k
// 1.051x -> 0.905x: at d = 64 a warpgroup's GEMMs are half as long per softmax, and from 32 key tiles on
// three warpgroups keep the tensor cores busier than two; on short rows the 128-row tile divides the
// sequence (192 does not: s512 is 3 tiles of which the last is two-thirds full) and puts one masked
// key tile per query tile instead of two. FASTATTN_CUDA_SM90_D64_TILE=128 / 192 forces one (128 only
// where the narrow tile serves: padded calls without a soft-cap whose mask is one-sided, or, forced
// only, no mask at all, where 192 rows leave s512's last tile a third empty too; timed on an H100
// in the thirty-fourth session, the narrow tile ran 0.78-0.94x the 192-row one there, and 0.86-0.95x
// on the causal rows past 16 key tiles). Returns kSm90D64NarrowBlockM or 0.
constexpr const char* kSm90D64TileEnv = "FASTATTN_CUDA_SM90_D64_TILE";
constexpr std::int64_t kSm90D64NarrowMaxKeyTiles = 16;
inline int sm90_d64_narrow_block_m(std::int64_t head_dim, std::int64_t seqlen_k, bool one_sided_mask, bool masked,
                                   bool varlen, bool softcap) {
  // Checked for every call (a bad value throws), also those the narrow tile does not serve.
  const int forced = env_choice<int>(EnvVar::cuda_sm90_d64_tile, {{"128", 128}, {"192", 192}}, 0);
  const bool serves = head_dim == 64 && (one_sided_mask || !masked) && !varlen && !softcap &&
                      sm90_forward_blocks(64).block_m != kSm90D64NarrowBlockM;
  const int block_n = sm90_forward_blocks(64, 0, kSm90D64NarrowBlockM).block_n;
  const bool by_rule = one_sided_mask && (seqlen_k + block_n - 1) / block_n <= kSm90D64NarrowMaxKeyTiles;
  return serves && (forced == 128 || (forced == 0 && by_rule)) ? kSm90D64NarrowBlockM : 0;
}

// The d = 128 short tile for short causal calls (kSm90D128ShortBlockM; the build knob above).
// On the short causal rows where issue 15's bars are missed (s512 / s1k) a 128-row query tile
// sees 1-8 key tiles of 128, one serial chain: Q's load, the first S = Q K^T and the last P V
// wait on each other (ncu of b32 h16 s512 d128 causal, thirty-fourth session: 9.2%, 4.2% and
// 4.0% of the warp samples), and a CTA runs one tile at a time. The short tile runs each 64-row
// query tile in a CTA of one consumer warpgroup, two CTAs per SM (Q, the 2-stage ring of 64-key
// tiles and the output tile: 98 KiB a CTA), so two chains share an SM and one's waits run under
// the other's GEMMs (docs/cuda.md's lead "each consumer warpgroup on its own 64-row tile").
// Where compiled it serves padded causal calls (a one-sided mask) without a soft-cap, by default
// those of at most kSm90D128ShortMaxKeyTiles key tiles of 128 (seqlen_k <= 1024); not yet timed.
// FASTATTN_CUDA_SM90_D128_TILE=64 / 128 forces it (where it serves) or the 128-row tile.
// Returns kSm90D128ShortBlockM or 0.
constexpr const char* kSm90D128TileEnv = "FASTATTN_CUDA_SM90_D128_TILE";
constexpr std::int64_t kSm90D128ShortMaxKeyTiles = 8;
constexpr bool sm90_d128_short_tile_compiled(std::int64_t head_dim) {
  return FASTATTN_SM90_D128_SHORT_TILE != 0 && head_dim == 128;
}
inline int sm90_d128_short_block_m(std::int64_t head_dim, std::int64_t seqlen_k, bool one_sided_mask, bool varlen,
                                   bool softcap) {
  // Checked for every call (a bad value throws), also those the short tile does not serve.
  const int forced = env_choice<int>(EnvVar::cuda_sm90_d128_tile, {{"64", 64}, {"128", 128}}, 0);
  const bool serves = sm90_d128_short_tile_compiled(head_dim) && one_sided_mask && !varlen && !softcap;
  const bool by_rule = (seqlen_k + 127) / 128 <= kSm90D128ShortMaxKeyTiles;
  return serves && (forced == 64 || (forced == 0 && by_rule)) ? kSm90D128ShortBlockM : 0;
}

// Which tiles a CTA runs (tile_scheduler.cuh):
//   grid        one CTA per (query block, head, batch) tile, the last query block of each
//               (head, batch) first; the hardware hands CTAs to SMs as they free up.
//   persistent  one CTA per SM looping over the tiles with a static stride of the grid size, in
//               longest-first order (under a causal mask or a window the last query blocks see
//               the most keys): heads in sections whose K/V fit half the L2, and inside a
//               section every head's last query block before any head's previous one, so the
//               short tiles fill the last wave (FA3's "LPT" order, hopper/tile_scheduler.hpp;
//               our code). The next tile's K and Q loads overlap the current tile's last
//               P V and epilogue, and the setup (barriers, tensor-map prefetch) is paid once
//               per SM, not per tile.
//   dynamic     persistent's CTAs and tile order, but a CTA takes its next tile from a global
//               atomic counter (the producer thread fetches it one tile ahead and hands it to
//               the consumers through shared memory), so a CTA that drew long tiles takes fewer:
//               no CTA idles while others still hold several long tiles (FA3's causal scheduler
//               does the same). Needs kSm90TileCounterBytes of scratch, zeroed on the call's
//               stream before the launch (cudaMemsetAsync: graph-capturable).
// Default (measured on the H200, 2026-12-02, docs/cuda-sm90-forward-measurements.md "Scheduler, order
// and key tile", one job, every combination of scheduler, ordered issue and key tile beside cuDNN):
// persistent when a query tile visits at most sm90_persistent_max_key_tiles() key tiles on average,
// grid otherwise.
//   overlap kernels (d = 96, 128), which issue in order under persistent (sm90_wg_order), under
//     a mask: up to 32 (persistent and ordered was 1-12% faster than grid up to there: GQA 32/8
//     s4k causal 0.980x against 0.913x, s8k causal 0.998x against 0.992x; grid from 64: s16k
//     causal b1 1.060x against 0.884x);
//   overlap kernels without a mask: at every length. With the per-pair sections and the TMA
//     store (tenth session) persistent beat grid on the long rows too (2026-12-04, eleventh
//     session job2, two rounds each: d128 s8k 1.010x cuDNN against 0.990x, s16k 1.025x / 1.028x
//     against 1.004x / 1.020x, s32k 1.044x / 1.047x against 1.042x / 1.048x);
//   plain-loop kernels (d = 64, 256) with no mask or a two-sided window: up to 64 (d64 s2k
//     1.007x against 0.944x, s8k 1.107x against 1.087x; s16k (128 tiles) grid 1.164x, 1.157x);
//   plain-loop kernels under a one-sided (causal) mask: up to 4 (d64 s1k causal 0.708x against
//     0.606x; from s2k (8) grid: 0.788x against 0.767x, d256 s4k 0.886x against 0.840x).
// Under a causal mask the static stride loads CTAs unevenly when few (head, batch) pairs share a
// query-block rank (d256 s16k causal b1 h8: grid 1.064x, persistent 0.622x). dynamic is never
// the default (the A/B of 2026-12-01). FASTATTN_CUDA_SM90_SCHEDULER=grid|persistent|dynamic
// forces one.
enum class Sm90Scheduler { grid, persistent, dynamic };
// How the persistent (and dynamic) numbering groups (head, batch) pairs (tile_scheduler.cuh):
//   l2_half   sections of the pairs whose K/V fit half the L2, inside a section every pair's
//             last query block before any pair's previous one (longest first)
//   per_pair  sections of one pair: a pair's query blocks are consecutive tiles, so they run at
//             the same time and read its K/V from DRAM once. Without a mask every tile is as
//             long as another, so there is no long-first order to keep; under a mask the
//             stride would hand a CTA the same query-block rank in every section (measured:
//             20-30% slower on causal rows up to s4k, docs/cuda-sm90-forward-measurements.md).
//   wave      sections of about one wave of tiles (ceil(grid / query blocks) pairs), the
//             ranks reversed in every other section, so a CTA's tiles alternate long and short
//             under a causal mask while a pair's query blocks still run close together.
// Default: per_pair without a mask; wave for the d = 64 narrow tile's (causal) calls and for
// the d = 128 / 256 calls of sm90_wave_sections_pay below; l2_half for the other masked calls and for
// varlen. Measured on the H200 (2026-12-04, eleventh session, job1, two rounds): wave on the
// narrow tile, causal d64 s1k 0.785x -> 0.806x cuDNN, s2k 0.839x -> 0.858x, s512 0.751x ->
// 0.746x; on the default tiles it was mixed: d128 causal s2k 0.984x -> 0.996x, s4k 0.992x ->
// 1.023x, s8k 1.014x -> 1.028x, but s512 0.944x -> 0.900x, s1k 0.970x -> 0.945x, GQA 32/8 s4k
// 1.006x -> 0.988x and s8k 1.004x -> 0.997x (a KV head's 4 query heads split across a wave's
// pairs), d64 and d256 within the spread. d = 256 causal of 16 key tiles or more takes them since
// the thirty-sixth session (below).
enum class Sm90Sections { l2_half, per_pair, wave };
// The default tiles' calls that take the wave sections: what job1 measured, d = 128 (d = 96 and
// 256 not measured / within the spread), causal (a mask bounded on the right only), padded,
// without soft-cap or GQA, whose query tiles see on average kSm90WaveMinKeyTiles key tiles or
// more (causal s2k: 8), and the shorter ones too on a device whose DRAM bandwidth per SM is
// below kSm90WaveShortMaxGbsPerSm. Those short causal rows read much for their work (b32 h16
// s512 d128: 268 MB of Q, K, V and O, 80 us at the H100's 3.35 TB/s, of a 141 us call), and
// with the wave sections less of it comes from DRAM again (ncu: about 261 against 322 MB). On
// an H100 80GB HBM3 (25 GB/s per SM; thirty-second session,
// bench/results/nvidia-h100-session32-2026-12-07 calls 3-5) they took 7-26% off every causal
// d128 s512 / s1k shape of b8-b64 h16-h32 (ncu at b32 h16 s512: 155 -> 133 us, L2 hit rate 48%
// -> 55%), 0.723x -> 0.898x cuDNN at b32 h16 s512. On the H200 (about 36 GB/s per SM: 4.8 TB/s)
// the eleventh session's A/B had them slower there (above), so it keeps the L2-half sections
// until it is timed again. On such a device causal sliding windows (a left bound, the right
// bound at the diagonal) take them too: windows of 128-2048 keys at s1k / s4k, b4 / b16 h16,
// ran at 0.84-1.016x the L2-half sections' time, 13 of 16 faster (call 7). GQA stays out: mixed
// there (1-3% slower at s512, call 6). dram_gbs_per_sm: 0 when unknown (then the key-tile rule
// alone).
// d = 256 (128 x 80 tiles) takes them on causal calls of kSm90WaveMinKeyTilesD256 key tiles or
// more, whatever the bandwidth: b4 h8 s4k d256 causal (26 key tiles a query tile on average,
// 1024 tiles of about 8 per CTA under the persistent scheduler) ran at 0.903x cuDNN with the
// L2-half sections and 1.017x with the wave's (H100, thirty-sixth session, call 4: two rounds;
// bench/results/nvidia-h100-session36-2026-12-07): a CTA's tiles alternate long and short, so
// the CTAs end together. Longer causal calls run the grid scheduler, where the sections do not
// change the time (s8k / s16k within 0.2%). Shorter ones (s2k: 13) were not timed, so they keep
// the L2-half sections.
constexpr std::int64_t kSm90WaveMinKeyTiles = 8;
constexpr std::int64_t kSm90WaveMinKeyTilesD256 = 16;
constexpr double kSm90WaveShortMaxGbsPerSm = 30.0;
// causal: window (-1, >= 0); causal_window: window (>= 0, 0).
constexpr bool sm90_wave_sections_pay(std::int64_t head_dim, bool causal, bool causal_window, bool varlen,
                                      bool softcap, std::int64_t heads_per_kv_head, std::int64_t avg_key_tiles,
                                      double dram_gbs_per_sm) {
  const bool bandwidth_poor = dram_gbs_per_sm > 0.0 && dram_gbs_per_sm < kSm90WaveShortMaxGbsPerSm;
  if ((head_dim != 128 && head_dim != 256) || varlen || softcap || heads_per_kv_head != 1) return false;
  if (head_dim == 256) return causal && avg_key_tiles >= kSm90WaveMinKeyTilesD256;
  if (causal) return avg_key_tiles >= kSm90WaveMinKeyTiles || bandwidth_poor;
  return causal_window && bandwidth_poor;
}
constexpr const char* kSm90SectionsEnv = "FASTATTN_CUDA_SM90_SECTIONS";
// uneven_tiles: the call's query tiles can differ in length (a causal mask or a window, or
// varlen, whose tiles past a short sequence are empty); wave: the call runs d = 64's narrow tile
// (always causal) or sm90_wave_sections_pay says so. FASTATTN_CUDA_SM90_SECTIONS=l2 / pair /
// wave forces one.
inline Sm90Sections sm90_sections(bool uneven_tiles, bool wave) {
  const Sm90Sections by_rule = wave           ? Sm90Sections::wave
                               : uneven_tiles ? Sm90Sections::l2_half
                                              : Sm90Sections::per_pair;
  return env_choice<Sm90Sections>(
      EnvVar::cuda_sm90_sections,
      {{"l2", Sm90Sections::l2_half}, {"pair", Sm90Sections::per_pair}, {"wave", Sm90Sections::wave}}, by_rule);
}
inline const char* to_string(Sm90Sections s) {
  return s == Sm90Sections::per_pair ? "per (head, batch)" : s == Sm90Sections::wave ? "one wave, alternating" : "half the L2";
}
constexpr const char* kSm90SchedulerEnv = "FASTATTN_CUDA_SM90_SCHEDULER";
// masked: a causal mask or a window (either side); one_sided_mask: a causal mask (a window
// bounded on one side only).
constexpr std::int64_t sm90_persistent_max_key_tiles(bool overlap, bool masked, bool one_sided_mask) {
  return overlap ? (masked ? 32 : std::numeric_limits<std::int64_t>::max()) : one_sided_mask ? 4 : 64;
}
// The dynamic scheduler's scratch: one 64-bit tile counter, in a 256-byte aligned block (the
// workspace layout's alignment, scratch_align.hpp).
constexpr std::size_t kSm90TileCounterBytes = 256;
inline const char* to_string(Sm90Scheduler s) {
  return s == Sm90Scheduler::grid ? "grid" : s == Sm90Scheduler::persistent ? "persistent" : "dynamic";
}
// average_key_tiles: key tiles one query tile visits, on average over the query tiles; overlap:
// the overlap kernels run (sm90_overlap); masked, one_sided_mask: as above.
inline Sm90Scheduler sm90_scheduler(std::int64_t average_key_tiles, bool overlap, bool masked, bool one_sided_mask) {
  const Sm90Scheduler by_rule = average_key_tiles <= sm90_persistent_max_key_tiles(overlap, masked, one_sided_mask)
                                    ? Sm90Scheduler::persistent
                                    : Sm90Scheduler::grid;
  return env_choice<Sm90Scheduler>(EnvVar::cuda_sm90_scheduler,
                                   {{"grid", Sm90Scheduler::grid},
                                    {"persistent", Sm90Scheduler::persistent},
                                    {"dynamic", Sm90Scheduler::dynamic}},
                                   by_rule);
}

// One arrival per consumer warpgroup on a K/V stage's empty barrier (consumer.cuh:
// release_kv_stage), from one thread once the warpgroup's wgmma that read the stage completed,
// in place of one arrival per consumer thread. A wgmma is one operation of the whole warpgroup,
// so one thread's wait for it covers the warpgroup's reads; CUTLASS's PipelineTmaAsync counts
// consumer arrivals per warpgroup, and FlashAttention's CuTe-DSL forward found the per-thread
// arrivals slower, "especially hdim 128 causal" (its PipelineTmaAsyncNoCluster). Build knob
// FASTATTN_SM90_ELECTED_RELEASE (default 0: every consumer thread arrives, as before; 1 for A/B
// builds, not yet timed on a GPU). The clustered kernels below always release this way.
#ifndef FASTATTN_SM90_ELECTED_RELEASE
#define FASTATTN_SM90_ELECTED_RELEASE 0
#endif
constexpr bool kSm90ElectedRelease = FASTATTN_SM90_ELECTED_RELEASE != 0;

// Two-CTA clusters sharing the K/V loads (issue 15's "2-CTA clusters with K/V multicast where
// they measure faster"; FA3 runs ClusterM = 2 at d >= 128 without a mask when the query blocks
// are even in number, hopper/flash_fwd_launch_template.h). The two CTAs of a cluster run query
// blocks 2j and 2j + 1 of one (head, batch), so they visit the same key tiles: each CTA's
// producer loads one of the two 64-column panels of every K and V tile and multicasts it into
// both CTAs' shared memory (producer.cuh), which halves the K/V bytes the L2 sends to the SMs; a
// stage is refilled only once the consumers of both CTAs released it (consumer.cuh). Served:
// d = 128 on its own tiles (not the wide key tile), padded, without a mask (every query block
// sees every key tile) or soft-cap, the overlap loop with the ordered issue under the
// persistent scheduler in per-(head, batch) sections (tile numbers 2j and 2j + 1, which the
// cluster's CTAs take, are then one pair's query blocks: tile_scheduler.cuh), and an even number
// of query blocks. Build knob FASTATTN_SM90_KV_MULTICAST (default 0: not compiled; 1 for A/B
// builds, not yet timed on a GPU); where compiled, the plan takes it for the calls it serves
// unless FASTATTN_CUDA_SM90_CLUSTER=0.
#ifndef FASTATTN_SM90_KV_MULTICAST
#define FASTATTN_SM90_KV_MULTICAST 0
#endif
constexpr int kSm90ClusterSize = 2;
constexpr bool sm90_cluster_compiled(std::int64_t head_dim) { return FASTATTN_SM90_KV_MULTICAST != 0 && head_dim == 128; }
struct Sm90ClusterCall {
  std::int64_t head_dim;
  bool own_tiles;  // the head dim's query and key tiles (not the wide or the narrow one)
  bool masked, varlen, softcap;
  bool overlap, wg_order;
  Sm90Scheduler scheduler;
  Sm90Sections sections;
  std::int64_t m_blocks;  // query blocks per (head, batch)
};
constexpr bool sm90_cluster_serves(const Sm90ClusterCall& c) {
  return sm90_cluster_compiled(c.head_dim) && c.own_tiles && !c.masked && !c.varlen && !c.softcap && c.overlap &&
         c.wg_order && c.scheduler == Sm90Scheduler::persistent && c.sections == Sm90Sections::per_pair &&
         c.m_blocks % kSm90ClusterSize == 0;
}
constexpr const char* kSm90ClusterEnv = "FASTATTN_CUDA_SM90_CLUSTER";
// The variable is checked for every sm90 call (a bad value throws), also those it cannot serve.
inline bool sm90_cluster(const Sm90ClusterCall& c) {
  return env_switch(EnvVar::cuda_sm90_cluster, "1", "0", true) && sm90_cluster_serves(c);
}

// Varlen batches (cu_seqlens_q / cu_seqlens_k, packed [total_tokens, heads, d]) on the sm90
// kernels: tensor maps over the packed tokens, each tile's sequence bounds read from
// cu_seqlens, the key tail masked, the epilogue bounded to the sequence (tile_scheduler.cuh,
// producer.cuh, epilogue.cuh). false: varlen calls run the sm80 kernels with a reason, and no
// varlen sm90 kernel is compiled (launch.cuh) -- the one switch if the varlen kernels misbehave.
constexpr bool kSm90Varlen = true;

// Positions in 32 bits: every tile visit works out its key range and its full key tiles from
// positions and windows (tile_scheduler.cuh, consumer.cuh: SequenceMask32), in the producer and
// in every consumer thread before the tile's first load or GEMM, where on short rows nothing
// overlaps it (docs/cuda-sm90-forward-measurements-h100.md, "Positions in 32 bits and the finalize by
// the SFU"). The launcher clamps the windows to L = seqlen_q + seqlen_k (below;
// a window that wide bounds no query of the call: key j of a sequence is below len_k <= L and
// its diagonal d = i + offset in [-len_q, len_q + len_k)), so with L below kSm90MaxPositions
// every sum there stays below 3 * 2^29 + 256 < 2^31. Longer calls (K and V of 2^29 tokens at
// d = 64 are 128 GiB a KV head) run the sm80 kernels with a reason (heuristics.hpp).
constexpr std::int64_t kSm90MaxPositions = std::int64_t{1} << 29;
constexpr bool sm90_positions_fit(std::int64_t seqlen_q, std::int64_t seqlen_k) {
  return seqlen_q + seqlen_k < kSm90MaxPositions;
}
constexpr std::int64_t sm90_clamped_window(std::int64_t window, std::int64_t seqlen_q, std::int64_t seqlen_k) {
  return window > seqlen_q + seqlen_k ? seqlen_q + seqlen_k : window;
}

// What the dispatcher's plan decided for one sm90 launch (heuristics.hpp: plan_forward_sm90);
// the launcher (launch.cuh) follows it and reads no environment of its own.
struct Sm90LaunchChoice {
  bool overlap = true;
  bool wg_order = false;  // overlap kernels: the consumer warpgroups issue their GEMMs in turn
  int block_n = 0;        // 0: the head dim's key tile; kSm90WideBlockN: the wide one
  int block_m = 0;        // 0: the head dim's query tile; kSm90D64NarrowBlockM: d = 64's narrow one;
                          // kSm90D128ShortBlockM: d = 128's short one
  Sm90Scheduler scheduler = Sm90Scheduler::persistent;
  Sm90Sections sections = Sm90Sections::l2_half;  // persistent, dynamic: the numbering's sections
  bool tma_store = false;  // the epilogue's TMA store (the plan checked the tile, the call and out's layout)
  int cta_slots = 1;       // persistent, dynamic: the grid (SMs x the tile's CTAs per SM)
  bool cluster = false;     // two-CTA clusters sharing the K/V loads (sm90_cluster)
  // dynamic: kSm90TileCounterBytes of device scratch for the tile counter (the launcher zeroes
  // it on the call's stream); null otherwise.
  void* tile_counter = nullptr;
};

// The output tile in shared memory (epilogue.cuh: the TMA store of O), block_m x the tile's
// head dim, 16-bit, where it fits beside Q and the ring: d = 64, 96, 128 with their own key
// tiles; not d = 256 (Q and the ring fill the shared memory) nor the wide key tile at d = 128.
constexpr int kSm90SmemLimit = 232448;  // sm90's opt-in dynamic shared memory per block
constexpr int sm90_forward_smem_bytes_without_o(const Sm90ForwardBlocks& b, std::int64_t head_dim) {
  return static_cast<int>((b.block_m + 2 * b.stages * b.block_n) * sm90_tile_head_dim(head_dim) * 2) + 2048;
}
constexpr bool sm90_output_tile_fits(const Sm90ForwardBlocks& b, std::int64_t head_dim) {
  return sm90_forward_smem_bytes_without_o(b, head_dim) + b.block_m * sm90_tile_head_dim(head_dim) * 2 <=
         kSm90SmemLimit;
}
// Dynamic shared memory: Q, the (K, V) ring, the output tile where it fits, 1 KiB of barriers,
// and 1 KiB of slack to align the tiles to the 1024-byte swizzle atom.
constexpr int sm90_forward_smem_bytes(const Sm90ForwardBlocks& b, std::int64_t head_dim) {
  return sm90_forward_smem_bytes_without_o(b, head_dim) +
         (sm90_output_tile_fits(b, head_dim) ? static_cast<int>(b.block_m * sm90_tile_head_dim(head_dim) * 2) : 0);
}
// How many CTAs of a tile's kernel share an SM: two for the d = 128 short tile (its
// __launch_bounds__' minimum, so 128 registers a thread at launch; traits.cuh), one otherwise.
constexpr int kSm90SmemPerSm = 233472;  // sm90: 228 KiB of shared memory per SM, of which 1 KiB per CTA is reserved
constexpr int sm90_ctas_per_sm(const Sm90ForwardBlocks& b) { return b.block_m == kSm90D128ShortBlockM ? 2 : 1; }
static_assert(2 * (sm90_forward_smem_bytes(sm90_forward_blocks(128, 0, kSm90D128ShortBlockM), 128) + 1024) <=
                  kSm90SmemPerSm,
              "two CTAs of the d = 128 short tile share an SM");

// Whether TMA can describe an operand: 16-byte aligned base, and for every dimension of extent
// > 1 a positive stride that is a multiple of 16 bytes and below 2^40 bytes (the
// cuTensorMapEncodeTiled rules). Extent-1 dimensions get a synthetic stride (tensor_map.hpp).
inline bool sm90_tma_describes(const Operand& op, std::int64_t batch, std::int64_t seqlen, std::int64_t heads) {
  if (reinterpret_cast<std::uintptr_t>(op.data) % 16 != 0) return false;
  auto ok = [](std::int64_t stride_elems, std::int64_t extent) {
    if (extent <= 1) return true;
    const std::int64_t bytes = stride_elems * 2;
    return bytes > 0 && bytes % 16 == 0 && bytes < (std::int64_t{1} << 40);
  };
  return ok(op.stride.token, seqlen) && ok(op.stride.head, heads) && ok(op.stride.batch, batch);
}

// q, k, v (the TMA-loaded operands) of a problem. Varlen: one batch of total_q / total_k
// packed tokens (the batch stride is unused; cu_seqlens give the offsets).
inline bool sm90_tma_describes(const AttentionProblem& p) {
  const bool varlen = p.is_varlen();
  const std::int64_t batch = varlen ? 1 : p.batch;
  const std::int64_t tokens_q = varlen ? p.total_q : p.seqlen_q, tokens_k = varlen ? p.total_k : p.seqlen_k;
  return sm90_tma_describes(p.q, batch, tokens_q, p.num_heads) &&
         sm90_tma_describes(p.k, batch, tokens_k, p.num_kv_heads) &&
         sm90_tma_describes(p.v, batch, tokens_k, p.num_kv_heads);
}

}  // namespace fastattn::cuda
