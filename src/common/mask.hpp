// mask.hpp — the attention mask as arithmetic on positions, and the tiling-mask.
//
// No mask matrix is ever built. Visibility of key j to query i is a pair of inequalities
// (FastAttention's tiling-mask, and flash-attn's local/causal masks):
//   d = i + offset, offset = seqlen_k - seqlen_q (bottom-right) or 0 (top-left)
//   visible(i, j) = (left < 0 || j >= d - left) && (right < 0 || j <= d + right) && j < seqlen_k
// A (query tile, key tile) pair is classified once: empty tiles are skipped, full tiles run
// with no mask arithmetic, and only partial tiles evaluate the inequalities per element.
// This header is plain C++ so that CPU and CUDA kernels share one definition.
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define FASTATTN_HD __host__ __device__ __forceinline__
#else
#define FASTATTN_HD inline
#endif

namespace fastattn {

enum class TileClass : int { empty = 0, partial = 1, full = 2 };

// The mask of one sequence: its window and diagonal offset, in positions of type Index.
// SequenceMask (64-bit) serves every path; SequenceMask32 is the sm90 forward's per-tile copy,
// whose calls keep every sum below in 32 bits (kSm90MaxPositions, flash_fwd_sm90/plan.hpp).
template <class Index>
struct BasicSequenceMask {
  Index left = -1;   // -1: unbounded
  Index right = -1;  // -1: unbounded
  Index offset = 0;  // key index of query 0's diagonal
  Index seqlen_k = 0;

  // full_query_tiles' hi when no window bounds it: 2^31 (2^31 - 1 in 32 bits).
  static constexpr Index kNoQueryBound = sizeof(Index) > 4 ? static_cast<Index>(std::int64_t{1} << 31)
                                                           : static_cast<Index>(0x7fffffff);

  FASTATTN_HD bool visible(Index i, Index j) const {
    const Index d = i + offset;
    return j < seqlen_k && (left < 0 || j >= d - left) && (right < 0 || j <= d + right);
  }

  // First key visible to any query in [q0, q1) (clamped to [0, seqlen_k]).
  FASTATTN_HD Index key_begin(Index q0) const {
    if (left < 0) return 0;
    const Index b = q0 + offset - left;
    return b < 0 ? 0 : (b > seqlen_k ? seqlen_k : b);
  }
  // One past the last key visible to any query in [q0, q1) (clamped to [0, seqlen_k]).
  FASTATTN_HD Index key_end(Index q1) const {
    if (right < 0) return seqlen_k;
    const Index e = (q1 - 1) + offset + right + 1;
    return e < 0 ? 0 : (e > seqlen_k ? seqlen_k : e);
  }

  // floor(a / b) for b > 0 (full_key_tiles, full_query_tiles): one select and one truncating
  // division, a shift for a constant power of two (the sm90 backward computes full_query_tiles
  // on every step unless its work is in shared memory).
  FASTATTN_HD static Index floor_div(Index a, Index b) { return (a >= 0 ? a : a - b + 1) / b; }

  // Classify the tile of queries [q0, q1) x keys [k0, k1); requires q0 < q1, k0 < k1.
  // Pass the tile's nominal end k1 even when it reaches past seqlen_k: such a tile is partial,
  // so kernels that compute a whole padded tile mask the keys past the end (visible() checks
  // j < seqlen_k).
  FASTATTN_HD TileClass classify(Index q0, Index q1, Index k0, Index k1) const {
    const Index d_first = q0 + offset, d_last = (q1 - 1) + offset;
    bool all = k1 <= seqlen_k;
    if (left >= 0) {
      if (k1 - 1 < d_first - left) return TileClass::empty;  // every key left of every window
      if (k0 < d_last - left) all = false;
    }
    if (right >= 0) {
      if (k0 > d_last + right) return TileClass::empty;  // every key right of every window
      if (k1 - 1 > d_first + right) all = false;
    }
    return all ? TileClass::full : TileClass::partial;
  }

  // The key tiles [lo, hi) of `block_n` keys (tile n: keys [n block_n, (n + 1) block_n)) that
  // classify() calls full for the queries [q0, q1) (none when lo >= hi; q0 < q1, block_n > 0).
  // classify's three conditions each bound n on one side, so the full tiles are one range: a
  // key loop then decides per tile with two integer compares instead of classify's 64-bit
  // arithmetic (the sm90 forward, where that was ~40 instructions of every key tile). As
  // classify, for positions and windows below 2^62 in 64 bits (the CUDA path clamps windows to
  // 2^31), below kSm90MaxPositions in 32 bits.
  struct KeyTileRange {
    Index lo, hi;
  };
  FASTATTN_HD KeyTileRange full_key_tiles(Index q0, Index q1, Index block_n) const {
    const Index d_first = q0 + offset, d_last = (q1 - 1) + offset;
    // k1 <= seqlen_k: (n + 1) block_n <= seqlen_k
    Index hi = seqlen_k / block_n;
    // right: k1 - 1 <= d_first + right, i.e. (n + 1) block_n <= d_first + right + 1
    if (right >= 0) {
      const Index h = floor_div(d_first + right + 1, block_n);
      hi = h < hi ? h : hi;
    }
    // left: k0 >= d_last - left, i.e. n >= ceil((d_last - left) / block_n)
    Index lo = 0;
    if (left >= 0) {
      const Index l = -floor_div(-(d_last - left), block_n);
      lo = l > lo ? l : lo;
    }
    return {lo, hi};
  }

  // The query tiles [lo, hi) of `block_m` queries (tile m: queries [m block_m, (m + 1) block_m),
  // the last one's end padded as the backward passes it) that classify() calls full for the
  // keys [k0, k1) (the nominal end; none when lo >= hi): full_key_tiles' transpose, for a
  // K/V-stationary backward that walks query tiles. hi is kNoQueryBound when nothing bounds it.
  struct QueryTileRange {
    Index lo, hi;
  };
  FASTATTN_HD QueryTileRange full_query_tiles(Index k0, Index k1, Index block_m) const {
    if (k1 > seqlen_k) return {0, 0};
    // right: k1 - 1 <= q0 + offset + right, i.e. m >= ceil((k1 - 1 - offset - right) / block_m)
    Index lo = 0;
    if (right >= 0) {
      const Index l = -floor_div(-(k1 - 1 - offset - right), block_m);
      lo = l > lo ? l : lo;
    }
    // left: k0 >= (q1 - 1) + offset - left with q1 = (m + 1) block_m, i.e.
    // m + 1 <= floor((k0 - offset + left + 1) / block_m)
    Index hi = kNoQueryBound;
    if (left >= 0) {
      const Index h = floor_div(k0 - offset + left + 1, block_m);
      hi = h < hi ? h : hi;
    }
    return {lo, hi};
  }
};

using SequenceMask = BasicSequenceMask<std::int64_t>;
using SequenceMask32 = BasicSequenceMask<std::int32_t>;

}  // namespace fastattn
