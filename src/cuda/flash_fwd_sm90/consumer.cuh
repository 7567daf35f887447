// consumer.cuh — one consumer warpgroup of the sm90 forward: 64 query rows, the whole key
// range of the tile (FlashAttention-2's loop, on wgmma).
//
// Per key tile (stage s, use u; producer.cuh):
//   wait k_full[s]; S = Q K^T: head_dim / 16 wgmma m64n{kBlockN}k16, both operands in shared
//   memory (SS), one commit group; wait for it
//   mask (partial tiles only, flash_fwd/tile_ops.cuh) and online softmax in registers
//   (flash_fwd/softmax.cuh: exp2 with the scale folded into one FFMA; T::kExp2PolyEvery: a share
//   of the exponentials on the FMA pipe); O rescaled when a row max moved
//   P to 16-bit in registers: two n8 fragments of S are one k16 A fragment (wgmma.cuh)
//   wait v_full[s]; O += P V: kBlockN / 16 wgmma m64n{head_dim}k16, A from registers (RS), V
//   MN-major (trans-b); wait; arrive on v_empty[s] (k_empty[s] right after S landed)
// With kOverlap (the default) the softmax of tile i runs while tile i - 1's P V is on the tensor
// cores (consume() below). Varlen (kVarlen): before the P V of a sequence's last key tile, its
// V rows past the sequence's end are zeroed and the consumer warpgroups meet on named barrier 1
// (zero_v_rows_past_end). kWgOrder (overlap, two consumer warpgroups): the warpgroups issue
// their GEMMs in turn (wg_order_* below).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/fragments.cuh"
#include "cuda/common/smem_layout.cuh"
#include "cuda/flash_fwd/params.hpp"
#include "cuda/flash_fwd/softmax.cuh"
#include "cuda/flash_fwd/tile_ops.cuh"
#include "cuda/flash_fwd_sm90/producer.cuh"
#include "cuda/flash_fwd_sm90/tile_scheduler.cuh"
#include "cuda/sm80/mma.cuh"
#include "cuda/sm90/cluster.cuh"
#include "cuda/sm90/mbarrier.cuh"
#include "cuda/sm90/warpgroup.cuh"
#include "cuda/sm90/wgmma.cuh"

namespace fastattn::cuda {

template <class T>
struct Sm90ConsumerState {
  float acc_o[1][T::kNTilesO][4];  // O: (16 rows of this warp, kHeadDimTile) f32, m16n8 C layout
  OnlineSoftmax<2, T::kNTilesS> softmax;
};

// Issues acc_s = Q_wg K^T (no wait): the warpgroup's 64 rows of Q (rows 64 * wg of sQ) against
// the stage's keys, head_dim / 16 wgmma in one commit group (d = 96: the zero padding of the
// 128-column tiles is skipped). kOverlap: called from the overlap loop. kN: the first kN keys of
// the tile (kBlockN, or its left half: LeftHalfTile below).
template <class T, bool kOverlap, int kN = T::kBlockN>
__device__ __forceinline__ void issue_qk(float (&acc_s)[kN / 8][4], uint32_t sQ, uint32_t sK, int wg) {
  using E = typename T::Element;
  if constexpr (T::kConsumerWarpgroups == 3 || (T::kHeadDimTile == 256 && kOverlap)) {
    // Three consumer warpgroups have 160 registers a thread: through an opaque move, Q's
    // descriptors are rebuilt per key tile (a few uniform-datapath ops) instead of being hoisted
    // out of the loop, where the overlap loop (an A/B build until the thirty-third session)
    // spilled them (4 x 64 bits, LDL.64 every tile). The plain loop compiles without spills
    // either way (nvcc 13.0); its kernels as timed have the move.
    // d = 256's overlap loop (O alone is 128 registers) spilled its 16 hoisted descriptors the
    // same way (68-104 bytes; 0 with the move). The plain d = 256 loop does not need it.
    asm volatile("mov.b32 %0, %0;\n" : "+r"(sQ));
  }
  // Each operand's first descriptor built once, the others advanced from it by the k16 step's
  // constant offset (sm90::descriptor_advance: the same values, fewer instructions).
  const uint64_t desc_q0 = sm90::kmajor_descriptor(sQ + wg * 64 * 128);
  const uint64_t desc_k0 = sm90::kmajor_descriptor(sK);
#pragma unroll
  for (int kk = 0; kk < T::kHeadDim / 16; ++kk) {
    const int panel = kk / 4, chunk = kk % 4;  // 4 k16 steps per 128-byte row
    const uint64_t desc_q = sm90::descriptor_advance(desc_q0, panel * T::kPanelBytesQ + chunk * 32);
    const uint64_t desc_k = sm90::descriptor_advance(desc_k0, panel * T::kPanelBytesKV + chunk * 32);
    sm90::mma_ss<kN, E>(acc_s, desc_q, desc_k, kk > 0 ? 1 : 0);
  }
  sm90::warpgroup_commit();
}

// P (the softmax's output, f32 in the S layout) as 16-bit A fragments: two n8 fragments of S
// are one k16 A fragment. kN < kNTilesS: P of the tile's first kN fragments, the rest 0 (the
// left half of a tile: softmax_left_half).
template <class T, int kN = T::kNTilesS>
__device__ __forceinline__ void pack_p(uint32_t (&a)[T::kBlockN / 16][4], const float (&p)[kN][4]) {
  using E = typename T::Element;
#pragma unroll
  for (int kp = 0; kp < T::kBlockN / 16; ++kp) {
    if (2 * kp < kN) {
      a[kp][0] = sm80::pack2<E>(p[2 * kp][0], p[2 * kp][1]);
      a[kp][1] = sm80::pack2<E>(p[2 * kp][2], p[2 * kp][3]);
      a[kp][2] = sm80::pack2<E>(p[2 * kp + 1][0], p[2 * kp + 1][1]);
      a[kp][3] = sm80::pack2<E>(p[2 * kp + 1][2], p[2 * kp + 1][3]);
    } else {
      a[kp][0] = a[kp][1] = a[kp][2] = a[kp][3] = 0u;
    }
  }
}

// Issues acc_o += P V (no wait): kBlockN / 16 wgmma, A from registers, V MN-major, all
// kHeadDimTile columns.
template <class T>
__device__ __forceinline__ void issue_pv(float (&acc_o)[T::kNTilesO][4], const uint32_t (&a)[T::kBlockN / 16][4],
                                         uint32_t sV) {
  using E = typename T::Element;
  const uint64_t desc_v0 = sm90::mnmajor_descriptor(sV, T::kPanelBytesKV);
#pragma unroll
  for (int kp = 0; kp < T::kBlockN / 16; ++kp) {
    // 16 keys = two 8-row swizzle atoms (2048 bytes) further into every panel.
    const uint64_t desc_v = sm90::descriptor_advance(desc_v0, kp * 16 * 128);
    sm90::mma_rs_tb<T::kHeadDimTile, E>(acc_o, a[kp], desc_v, 1);
  }
  sm90::warpgroup_commit();
}

// Releases a K or V stage once this thread waited for the warpgroup's wgmma that read it
// (producer.cuh: sm90_kv_empty_arrivals). Two-CTA clusters (kCluster): the stage is filled in
// both CTAs by both producers, so each consumer warpgroup arrives once on the barrier of each
// CTA (lane r of its first warp on rank r's). kSm90ElectedRelease: one arrival per consumer
// warpgroup, on this CTA's barrier (plan.hpp says why one thread may). Otherwise every
// consumer thread arrives.
template <bool kCluster>
__device__ __forceinline__ void release_kv_stage(uint32_t bar, int warp_in_wg, int lane) {
  if constexpr (kCluster) {
    if (warp_in_wg == 0 && lane < kSm90ClusterSize) sm90::mbarrier_arrive_cluster(bar, static_cast<uint32_t>(lane));
  } else if constexpr (kSm90ElectedRelease) {
    if (warp_in_wg == 0 && lane == 0) sm90::mbarrier_arrive(bar);
  } else {
    sm90::mbarrier_arrive(bar);
  }
}

// Named barrier 1: the consumer warpgroups, after zeroing V rows past a varlen sequence's end.
constexpr int kBarConsumersVTail = 1;

// Varlen only: zeroes the V rows [first_row, kBlockN) of a landed stage, the keys past the
// sequence's end. The packed tensor map loads the next sequence's tokens there (or zeros past
// the tensor's end); their P is 0, but 0 x a non-finite value in that other sequence would be
// NaN in this one. All consumer threads, then a barrier among them: the stage's V is read by
// every consumer warpgroup's wgmma (the async proxy, hence the fence first). The producer
// refills the stage only after every consumer released it (v_empty), after its P V.
// sV: (kBlockN, kHeadDimTile) 16-bit, kPanels panels of kBlockN x 128 bytes, 128-byte swizzle
// (PanelTile, the layout TMA writes).
template <class T>
__device__ __forceinline__ void zero_v_rows_past_end(uint32_t sV, int first_row, int consumer_tid) {
  constexpr int kChunks = T::kPanels * 8;  // 16-byte chunks of a row
  const int rows = T::kBlockN - first_row;
  for (int idx = consumer_tid; idx < rows * kChunks; idx += T::kConsumerThreads) {
    const uint32_t at = sV + PanelTile<T::kBlockN>::offset(first_row + idx / kChunks, idx % kChunks);
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0u) : "memory");
  }
  sm90::fence_proxy_async_shared();
  sm90::named_barrier_sync(kBarConsumersVTail, T::kConsumerThreads);
}

// Ordered GEMM issue (plan.hpp: sm90_wg_order; FA3's warp scheduler barriers). Named barrier
// 2 + w is warpgroup w's turn: it syncs there (128 threads) before issuing its S = Q K^T (and,
// in the loop, the previous tile's P V after it), and the other warpgroup's arrival (128 more)
// hands it the turn. Warpgroup 1 arrives once at the start, so warpgroup 0 goes first; after
// that each issue hands the turn over, so a warpgroup's softmax runs while the other's GEMMs
// hold the tensor cores instead of both issuing at once. Both warpgroups take the same number
// of turns per tile (the same key tiles), so the barriers pair up across tiles; the last
// arrival of the CTA is never waited for.
constexpr int kBarWgTurn0 = 2;
template <class T>
__device__ __forceinline__ void wg_order_start(int wg) {
  static_assert(T::kConsumerWarpgroups == 2, "ordered issue between two consumer warpgroups");
  if (wg == 1) sm90::named_barrier_arrive(kBarWgTurn0, 2 * sm90::kWarpgroupThreads);
}
__device__ __forceinline__ void wg_order_wait_turn(int wg) {
  sm90::named_barrier_sync(kBarWgTurn0 + wg, 2 * sm90::kWarpgroupThreads);
}
__device__ __forceinline__ void wg_order_pass_turn(int wg) {
  sm90::named_barrier_arrive(kBarWgTurn0 + 1 - wg, 2 * sm90::kWarpgroupThreads);
}

// Per-tile values of the consumer loop. [full_lo, full_hi): the key tiles classify() calls full
// (SequenceMask::full_key_tiles, worked out once per tile: the per-key-tile classify was ~40
// instructions of 64-bit arithmetic in every iteration of the d = 64 loop).
struct Sm90TileMask {
  int q_row0, diagonal, window_left, window_right;
  float exp_scale;
  int full_lo, full_hi;
};

// Mask (partial tiles) and online softmax of key tile n's S in place; rescale: per row, the
// factor O must be multiplied by before this tile's P V. Returns whether any row of the warp
// moved. kMayMask = false: the tile is known full (no mask code compiled).
template <class T, bool kSoftcap, bool kMayMask = true>
__device__ __forceinline__ bool softmax_tile(Sm90ConsumerState<T>& st, float (&acc_s)[1][T::kNTilesS][4],
                                             float (&rescale)[2], const ForwardParams& p, const Sm90TileWork& w,
                                             const Sm90TileMask& m, int n, int lane) {
  using Tile = typename T::WarpTile;
  const int k0 = n * T::kBlockN;
  const bool masked = kMayMask && !(n >= m.full_lo && n < m.full_hi);
  scale_and_mask<Tile, kSoftcap, true>(acc_s, p, masked, m.q_row0, k0, w.len_k, m.diagonal, m.window_left,
                                       m.window_right, lane);
  st.softmax.template update<1, kSm90TreeRowMax, T::kExp2PolyEvery, T::kExp2PolyDegree>(acc_s, rescale, m.exp_scale);
  return __any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f);
}

// The left half of a key tile (sm90_left_half_first_tile, plan.hpp): the keys [k0, k0 + kBlockN
// / 2), the first kNTilesS / 2 n8 fragments of S. K-major rows are keys, so its Q K^T is the
// same descriptors with n64 (issue_qk<T, kOverlap, kBlockN / 2>), into an accumulator of its
// own: the two issues then write disjoint arrays and no register is merged between them (into
// the whole tile's first half, ptxas injected warpgroup.arrive before both, C7519).
template <class T>
struct LeftHalfTile {
  using Arch = typename T::WarpTile::Arch;
  static constexpr int kMTiles = 1;
  static constexpr int kNTilesS = T::kNTilesS / 2;
};

// Key tile n's left half (the first tile visited: O is 0 and nothing to rescale) when this
// warpgroup's rows see none of its right half: the mask and the online softmax of the left
// half (the same row max and sum as over the whole tile, whose right half adds exp2(-inf) =
// 0), then P with the right half 0, so P V runs on the same P as for the whole tile.
template <class T, bool kSoftcap>
__device__ __forceinline__ void softmax_left_half(Sm90ConsumerState<T>& st, float (&acc_left)[1][T::kNTilesS / 2][4],
                                                  uint32_t (&a)[T::kBlockN / 16][4], const ForwardParams& p,
                                                  const Sm90TileWork& w, const Sm90TileMask& m, int n, int lane) {
  float rescale[2];
  scale_and_mask<LeftHalfTile<T>, kSoftcap, true>(acc_left, p, true, m.q_row0, n * T::kBlockN, w.len_k, m.diagonal,
                                                  m.window_left, m.window_right, lane);
  st.softmax.template update<1, kSm90TreeRowMax, T::kExp2PolyEvery, T::kExp2PolyDegree>(acc_left, rescale,
                                                                                         m.exp_scale);
  pack_p<T, T::kNTilesS / 2>(a, acc_left[0]);
}

// A consumer warpgroup's own key tiles among its tile's visits: i in [i_first, i_end) (visit i
// is key tile n_end - 1 - i), those one of its 64 rows before len_q sees a key of; none
// (i_first = i_end = tiles) for rows past the sequence's end or rows that see no key. The
// others it passes on (consume: pass_stage). Broadcast from lane 0: the bounds are uniform over
// the warpgroup, and ptxas must know that the wgmma they bound are not in a divergent path
// (C7520).
struct Sm90OwnKeyTiles {
  int i_first, i_end;
};
template <class T>
__device__ __forceinline__ Sm90OwnKeyTiles own_key_tiles(const Sm90TileWork& w, int wg) {
  const int tiles = w.n_end - w.n_begin;
  int i_first = tiles, i_end = tiles;
  const int row0 = w.q0 + wg * 64, row1 = min(row0 + 64, w.q1);
  const int key_begin = row0 < row1 ? w.mask.key_begin(row0) : 0;
  const int key_end = row0 < row1 ? w.mask.key_end(row1) : 0;
  if (key_begin < key_end) {
    const int own_begin = key_begin / T::kBlockN, own_end = (key_end + T::kBlockN - 1) / T::kBlockN;
    i_first = max(w.n_end - own_end, 0);
    i_end = max(min(w.n_end - own_begin, tiles), i_first);
  }
  return {__shfl_sync(0xffffffffu, i_first, 0), __shfl_sync(0xffffffffu, i_end, 0)};
}

template <class T>
__device__ __forceinline__ void rescale_o(Sm90ConsumerState<T>& st, const float (&rescale)[2]) {
#pragma unroll
  for (int nt = 0; nt < T::kNTilesO; ++nt) {
    st.acc_o[0][nt][0] *= rescale[0];
    st.acc_o[0][nt][1] *= rescale[0];
    st.acc_o[0][nt][2] *= rescale[1];
    st.acc_o[0][nt][3] *= rescale[1];
  }
}

// The main loop of consumer warpgroup `wg` (0-based among the consumers) over one tile; `count`
// (the CTA's key tiles and Q loads so far) gives the stages and barrier phases, and advances. kOverlap (plan.hpp:
// sm90_overlap):
//   false  per tile: S = Q K^T, wait; softmax; O += P V, wait; release the stage
//   true   tile 0's S and softmax first; then per tile i >= 1: issue S_i = Q K_i^T, issue
//          O += P_{i-1} V_{i-1}, wait for S_i alone (wait_group 1), release K_i, softmax of S_i
//          while the P V runs, wait for it, release V_{i-1}, rescale O, pack P_i; last, O += P V of the
//          last tile. O is rescaled to tile i's max only after P_{i-1} V_{i-1} landed in it.
// kVarlen: cu_seqlens batches (kernel.cuh); the padded kernels compile without the V-tail code.
// kCluster: the CTA is one of a two-CTA cluster whose producers fill each other's stages
// (plan.hpp: sm90_cluster); only the stages' release differs (release_kv_stage).
template <class T, bool kSoftcap, bool kOverlap, bool kVarlen, bool kWgOrder = false, bool kCluster = false>
__device__ __forceinline__ void consume(Sm90ConsumerState<T>& st, const Sm90Smem<T>& smem, const ForwardParams& p,
                                        const Sm90TileWork& w, Sm90PipelineCount& count, int wg, int warp_in_wg,
                                        int lane) {
  static_assert(!kWgOrder || kOverlap, "ordered issue: overlap loop only");
  clear_accumulator(st.acc_o);
  st.softmax.init();
  if (!w.has_keys()) return;
  const SequenceMask32::KeyTileRange full = w.mask.full_key_tiles(w.q0, w.q1, T::kBlockN);
  // clamped to the visited tiles [n_begin, n_end)
  auto visited = [&](int n) { return min(max(n, w.n_begin), w.n_end); };
  const Sm90TileMask m{w.q0 + wg * 64 + warp_in_wg * 16,
                       w.mask.offset,
                       w.mask.left,
                       w.mask.right,
                       fabsf(p.scale_log2),
                       visited(full.lo),
                       visited(full.hi)};
  const int tiles = w.n_end - w.n_begin;
  auto tile = [&](int i) { return w.n_end - 1 - i; };  // visited from the last key tile down
  auto key0 = [&](int i) { return tile(i) * T::kBlockN; };
  // Key tile i of this tile is key tile count.kv + i of the CTA (producer.cuh).
  // Unsigned (the count is never negative): the signed % and / took ~10 instructions a tile
  // for the sign fix-ups.
  auto stage_of = [&](int i) { return static_cast<int>(static_cast<uint32_t>(count.kv + i) % T::kStages); };
  auto parity = [&](int i) { return (static_cast<uint32_t>(count.kv + i) / T::kStages) & 1u; };
  float acc_s[1][T::kNTilesS][4];
  uint32_t a[T::kBlockN / 16][4];
  float rescale[2];
  // Tile 0 (the sequence's last key tile) reaches past a varlen sequence's end: its V rows there
  // are zeroed before its P V (zero_v_rows_past_end). Uniform over the consumer warpgroups.
  const bool v_tail = kVarlen && key0(0) + T::kBlockN > w.len_k;
  const int consumer_tid = wg * 128 + warp_in_wg * 32 + lane;
  // The plain loop's own key tiles (own_key_tiles), worked out before the Q wait: nothing of
  // it waits for Q, and on short rows that wait ends the tile's critical path.
  Sm90OwnKeyTiles own{0, tiles};
  if constexpr (!kOverlap) own = own_key_tiles<T>(w, wg);
  sm90::mbarrier_wait(smem.q_full(), static_cast<uint32_t>(count.q & 1));

  if constexpr (!kOverlap) {
    // On a causal diagonal a 192-row tile visits key tiles its first warpgroups see none of
    // (rows 192..255 of query tile 1 stop at key 255, the tile visits keys up to 383): such a
    // warpgroup only passes the stage on, and its share of the tensor cores goes to the others.
    // Causal work done at s4k: 94.1% of the 192-row tiles' GEMMs is needed, 97.0% of the
    // warpgroups' own tiles. A passed tile's stage is released once loaded (the producer
    // refills a stage only after every consumer thread's arrival, and an arrival before the
    // load could count towards the stage's previous use).
    auto pass_stage = [&](int i) {
      const int stage = stage_of(i);
      sm90::mbarrier_wait(smem.k_full(stage), parity(i));
      release_kv_stage<kCluster>(smem.k_empty(stage), warp_in_wg, lane);
      if (i == tiles - 1) sm90::mbarrier_arrive(smem.q_empty());
      sm90::mbarrier_wait(smem.v_full(stage), parity(i));
      release_kv_stage<kCluster>(smem.v_empty(stage), warp_in_wg, lane);
    };
    // A varlen tail (tile 0) is zeroed by every consumer warpgroup here, at one barrier
    // instruction: a warpgroup that passes tile 0 on and one that runs it would otherwise meet on
    // barrier 1 from two places, which compute-sanitizer's synccheck reports as divergent.
    if (v_tail) {
      sm90::mbarrier_wait(smem.v_full(stage_of(0)), parity(0));
      zero_v_rows_past_end<T>(smem.v(stage_of(0)), w.len_k - key0(0), consumer_tid);
    }
    for (int i = 0; i < own.i_first; ++i) pass_stage(i);
    for (int i = own.i_first; i < own.i_end; ++i) {
      const int stage = stage_of(i);
      sm90::mbarrier_wait(smem.k_full(stage), parity(i));
      sm90::warpgroup_fence();
      issue_qk<T, kOverlap>(acc_s[0], smem.q(), smem.k(stage), wg);
      sm90::warpgroup_wait<0>();
      sm90::fence_registers(acc_s[0]);
      release_kv_stage<kCluster>(smem.k_empty(stage), warp_in_wg, lane);
      if (i == tiles - 1) sm90::mbarrier_arrive(smem.q_empty());
      if (softmax_tile<T, kSoftcap>(st, acc_s, rescale, p, w, m, tile(i), lane)) rescale_o(st, rescale);
      pack_p<T>(a, acc_s[0]);
      sm90::mbarrier_wait(smem.v_full(stage), parity(i));
      sm90::fence_registers(st.acc_o[0]);
      sm90::fence_registers(a);
      sm90::warpgroup_fence();
      issue_pv<T>(st.acc_o[0], a, smem.v(stage));
      sm90::warpgroup_wait<0>();
      sm90::fence_registers(st.acc_o[0]);
      sm90::fence_registers(a);
      release_kv_stage<kCluster>(smem.v_empty(stage), warp_in_wg, lane);
    }
    for (int i = own.i_end; i < tiles; ++i) pass_stage(i);
  } else {
    // sm90_left_half_first_tile: this warpgroup's rows (those before len_q: the others are not
    // stored) see no key of tile 0's right half (a causal diagonal, or the sequence's end, left
    // of it). Uniform over the warpgroup; broadcast from lane 0 so that ptxas knows the wgmma
    // below are not in a divergent path (else it serialised them, C7520; CUTLASS's
    // canonical_warp_group_idx does the same). Two consumer warpgroups only (traits.cuh).
    constexpr bool kLeftHalf = T::kLeftHalfFirstTile;
    bool left_half = false;
    if constexpr (kLeftHalf) {
      const int rows_end = min(w.q0 + wg * 64 + 64, w.q1);
      left_half = __shfl_sync(0xffffffffu, w.mask.key_end(rows_end) <= key0(0) + T::kBlockN / 2, 0);
    }
    // S of tile 0's left half (left_half). Defined before the fence: its registers, read by the
    // first wgmma (accumulate = 0 ignores them), left undefined got a definition between the
    // fence and the wgmma (C7515, C7519).
    float acc_left[1][kLeftHalf ? T::kNTilesS / 2 : 1][4];
    if constexpr (kLeftHalf) {
      clear_accumulator(acc_left);
      sm90::fence_registers(acc_left[0]);
    }
    sm90::mbarrier_wait(smem.k_full(stage_of(0)), parity(0));
    if constexpr (kWgOrder) wg_order_wait_turn(wg);
    // Each branch a whole wgmma stage (fence, issue, wait): ptxas does not follow one across
    // the branches' merge (it injected warpgroup.arrive, C7519).
    if (left_half) {
      if constexpr (kLeftHalf) {
        sm90::warpgroup_fence();
        issue_qk<T, kOverlap, T::kBlockN / 2>(acc_left[0], smem.q(), smem.k(stage_of(0)), wg);
        if constexpr (kWgOrder) wg_order_pass_turn(wg);
        sm90::warpgroup_wait<0>();
        sm90::fence_registers(acc_left[0]);
      }
    } else {
      sm90::warpgroup_fence();
      issue_qk<T, kOverlap>(acc_s[0], smem.q(), smem.k(stage_of(0)), wg);
      if constexpr (kWgOrder) wg_order_pass_turn(wg);
      sm90::warpgroup_wait<0>();
      sm90::fence_registers(acc_s[0]);
    }
    release_kv_stage<kCluster>(smem.k_empty(stage_of(0)), warp_in_wg, lane);
    if (tiles == 1) sm90::mbarrier_arrive(smem.q_empty());
    if (left_half) {
      if constexpr (kLeftHalf) softmax_left_half<T, kSoftcap>(st, acc_left, a, p, w, m, tile(0), lane);
    } else {
      softmax_tile<T, kSoftcap>(st, acc_s, rescale, p, w, m, tile(0), lane);  // O is 0: no rescale
      pack_p<T>(a, acc_s[0]);
    }
    for (int i = 1; i < tiles; ++i) {
      const int stage = stage_of(i), prev = stage_of(i - 1);
      sm90::mbarrier_wait(smem.k_full(stage), parity(i));
      if constexpr (kWgOrder) {
        // Both operands ready before the turn is taken: the V tail's barrier among the consumer
        // warpgroups must not be met inside a turn (the other warpgroup waits for the turn).
        sm90::mbarrier_wait(smem.v_full(prev), parity(i - 1));
        if (i == 1 && v_tail) zero_v_rows_past_end<T>(smem.v(prev), w.len_k - key0(0), consumer_tid);
        wg_order_wait_turn(wg);
      }
      // P_{i-1} and the rescaled O are final before the fence: wgmma.fence orders register
      // writes before it, and the compiler may not sink the packing past it (else ptxas injects a
      // warpgroup.arrive, C7519).
      sm90::fence_registers(st.acc_o[0]);
      sm90::fence_registers(a);
      sm90::warpgroup_fence();
      issue_qk<T, kOverlap>(acc_s[0], smem.q(), smem.k(stage), wg);
      if constexpr (!kWgOrder) {
        sm90::mbarrier_wait(smem.v_full(prev), parity(i - 1));
        if (i == 1 && v_tail) zero_v_rows_past_end<T>(smem.v(prev), w.len_k - key0(0), consumer_tid);
      }
      sm90::warpgroup_fence();  // each batch its own fence, as ptxas wants (else C7519)
      issue_pv<T>(st.acc_o[0], a, smem.v(prev));
      if constexpr (kWgOrder) wg_order_pass_turn(wg);
      sm90::warpgroup_wait<1>();  // S_i landed; P_{i-1} V_{i-1} may still run
      sm90::fence_registers(acc_s[0]);
      release_kv_stage<kCluster>(smem.k_empty(stage), warp_in_wg, lane);
      if (i == tiles - 1) sm90::mbarrier_arrive(smem.q_empty());
      // The wide tile serves unmasked calls only (plan.hpp), where tile 0 (the last key tile)
      // is the only one that can be partial.
      const bool moved = softmax_tile<T, kSoftcap, !T::kUnmaskedCallsOnly>(st, acc_s, rescale, p, w, m, tile(i), lane);
      sm90::warpgroup_wait<0>();
      sm90::fence_registers(st.acc_o[0]);
      sm90::fence_registers(a);
      release_kv_stage<kCluster>(smem.v_empty(prev), warp_in_wg, lane);
      if (moved) rescale_o(st, rescale);
      pack_p<T>(a, acc_s[0]);
    }
    const int last = stage_of(tiles - 1);
    sm90::mbarrier_wait(smem.v_full(last), parity(tiles - 1));
    if (tiles == 1 && v_tail) zero_v_rows_past_end<T>(smem.v(last), w.len_k - key0(0), consumer_tid);
    sm90::fence_registers(st.acc_o[0]);
    sm90::fence_registers(a);
    sm90::warpgroup_fence();
    issue_pv<T>(st.acc_o[0], a, smem.v(last));
    sm90::warpgroup_wait<0>();
    sm90::fence_registers(st.acc_o[0]);
    sm90::fence_registers(a);
    release_kv_stage<kCluster>(smem.v_empty(last), warp_in_wg, lane);
  }
  count.kv += tiles;
  count.q += 1;
}

}  // namespace fastattn::cuda
