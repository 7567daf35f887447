// kv_cache_heuristics.hpp — the KV-cache attention kernel's tiles and its split-KV count, from
// the shape alone (host-only, no CUDA headers: kv_cache_plan, forward()'s router and the CPU
// unit tests share it).
//
// The kernel (kv_cache_kernel.cuh) is one 4-warp CTA per (batch, KV head, row block, key split).
// Its rows are the query heads of one KV head times the query tokens (GQA packing: row
// r = token * group + head_in_group), so each K/V byte is read once per row block: once in
// total for decode (rows <= 128). Row tiles:
//   16 rows  1 row warp  x 4 key warps  (decode: group x seqlen_q <= 16)
//   32 rows  2 row warps x 2 key warps
//   64 rows  4 row warps x 1 key warp
//   128 rows 4 row warps x 1 key warp, two 16-row MMA tiles each (not at head_dim 256: the O
//            accumulator would not fit the registers)
// Key warps split each K/V tile of kv_block_n keys between them and are merged in the epilogue,
// so a 16-row decode tile keeps four warps of MMA and load issue busy.
//
// Decode is a stream of K and V, and one CTA per SM keeps enough of it in flight to saturate the
// memory; a second CTA per SM, or a second wave, only adds splits, pipeline fills and combine
// work (H200, 2026-12-01, GQA 32/8 d128: b16 kv 32k, 128 CTAs 4623 GB/s, 256 CTAs 4440; b1 kv
// 128k, 16 splits 4075 GB/s, 33 splits 3846, 64 splits 3290; b1 kv 4k, 16 splits 938, 32 splits
// 784). So with fewer CTAs than SMs the keys are split into at most SMs / CTAs splits (one wave),
// the count of least cost(s) = ceil(tiles / s) + 1 tile of fixed cost per CTA + 2 tiles for the
// combine kernel when s > 1 (the smallest s on ties; a tile is kv_block_n keys, 32 KiB of K+V);
// with at least as many CTAs as SMs, no split. A paged cache is the exception: its gathers want
// two CTAs per SM, so its splits fill two slots per SM (kv_split_slots_per_sm, measured there).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/common/scratch_align.hpp"

namespace fastattn::cuda {

constexpr int kKVThreads = 128;            // 4 warps
constexpr int kKVMaxSplits = 128;          // the combine kernel's shared weights (kv_cache_combine.cuh)
constexpr int kKVMinTilesPerSplit = 2;     // a split streams at least 2 tiles (64 KiB of K+V)
constexpr int kKVCtaOverheadTiles = 1;     // pipeline fill + epilogue of a CTA, in tile-loads
constexpr int kKVCombineCostTiles = 2;     // the combine launch and its partials, in tile-loads
constexpr int kKVSmemReservedPerCta = 1024;

// Keys per K/V tile and pipeline depth: 32 KiB of K+V per tile at d <= 128 (64 KiB at 256),
// 3 stages (2 at 256), so 2 tiles (64 KiB) stay in flight while one is computed. The 16-row
// tile also has a deep ring (kv_deep_stages: 5 stages, 128 KiB in flight, one CTA per SM),
// which KVCacheLaunch::stages selects.
constexpr int kv_block_n(int head_dim) { return head_dim <= 64 ? 128 : 64; }
constexpr int kv_stages(int head_dim) { return head_dim <= 128 ? 3 : 2; }
constexpr int kv_deep_stages(int head_dim) { return head_dim <= 128 ? 5 : 0; }  // 0: none
constexpr int kv_max_rows_per_tile(int head_dim) { return head_dim <= 128 ? 128 : 64; }

struct KVRowTile {
  int rows = 16;      // rows per CTA
  int row_warps = 1;  // warps over the rows (16 * m_tiles rows each)
  int m_tiles = 1;    // 16-row MMA tiles per warp
  int key_warps = 4;  // warps over the keys of a tile
};

// The smallest row tile holding `rows` (group * seqlen_q) rows, up to the largest for head_dim.
constexpr KVRowTile kv_row_tile(std::int64_t rows, int head_dim) {
  const int largest = kv_max_rows_per_tile(head_dim);
  if (rows <= 16) return {16, 1, 1, 4};
  if (rows <= 32) return {32, 2, 1, 2};
  if (rows <= 64 || largest == 64) return {64, 4, 1, 1};
  return {128, 4, 2, 1};
}

// How K/V tiles reach shared memory (kv_cache_kernel.cuh):
//   cp_async: 16-byte cp.async per thread, any page size (rows gathered from their pages);
//   tma:      on sm90, one thread issues TMA box loads (sm90/tma.cuh) of whole 64-column panels
//             of kv_block_n rows, counted on an mbarrier per stage. For tiles that lie in one
//             page: the contiguous cache, or pages of a multiple of kv_block_n tokens
//             (kv_cache_plan.cu: kv_tma_decline_reason says when and why not).
enum class KVLoad { cp_async, tma };
inline const char* kv_load_text(KVLoad l) { return l == KVLoad::tma ? "TMA" : "cp.async"; }
// Whether a plan takes TMA loads where they can serve without FASTATTN_CUDA_KV_LOAD=tma. Not
// now: on the H200 (2026-12-02, docs/inference-cuda-decode.md, TMA loads) they ran
// 3-11% slower than the cp.async ring at the same depth, the kernel alone (b16 kv 32k GQA 32/8:
// 0.5294 against 0.4768 ms; MHA b16 kv 128k 8.078 against 7.696 ms), bitwise equal in results.
constexpr bool kKVTmaByDefault = false;

// Shared memory of a CTA: Q (rows x padded head_dim, 16-bit), then the K/V ring, which the
// epilogue reuses for the key warps' f32 partials (rows x (head_dim + 8) each, + an lse each).
// TMA loads add an mbarrier per stage after them, and 1024 bytes to align the ring's panels
// (TMA's 128-byte swizzle repeats every 1024 bytes; the dynamic shared memory's base is only
// 16-byte aligned by the language).
constexpr int kv_row_bytes(int head_dim) { return (head_dim + 63) / 64 * 64 * 2; }
constexpr int kv_epilogue_bytes(const KVRowTile& t, int head_dim) {
  return t.key_warps * t.rows * (head_dim + 8 + 1) * 4;
}
constexpr int kv_ring_or_epilogue_bytes(const KVRowTile& t, int head_dim, int stages) {
  const int ring = stages * 2 * kv_block_n(head_dim) * kv_row_bytes(head_dim);
  const int epilogue = kv_epilogue_bytes(t, head_dim);
  return ring > epilogue ? ring : epilogue;
}
// (The extra bytes cost the 64-row tile at head_dim 96 / 128 its second CTA per SM: 2 x 115,736
// bytes + the reserved 1 KiB each exceed an H200 SM's 233,472; kv_split_slots_per_sm counts the
// one that fits.)
constexpr int kv_tma_extra_bytes(int stages) { return 1024 + 8 * stages; }
constexpr int kv_smem_bytes(const KVRowTile& t, int head_dim, int stages, KVLoad load = KVLoad::cp_async) {
  return t.rows * kv_row_bytes(head_dim) + kv_ring_or_epilogue_bytes(t, head_dim, stages) +
         (load == KVLoad::tma ? kv_tma_extra_bytes(stages) : 0);
}
// __launch_bounds__ minimum CTAs per SM (kv_cache_kernel.cuh): 2 up to 64 rows with the default
// ring, 1 at 128 rows (two 16-row tiles per warp: ~230 registers) or with the deep ring.
constexpr int kv_launch_ctas_per_sm(const KVRowTile& t, int stages) { return t.rows <= 64 && stages <= 3 ? 2 : 1; }
// Slots per SM the split count counts (KVSplitShape::ctas_per_sm). A contiguous cache: one (see
// the head comment). A paged cache: two where the tile's launch bounds and the SM's shared memory
// (smem_per_sm bytes, the device's) hold two CTAs, else one. Its rows are gathered from pages
// anywhere in the pool, and a second CTA per SM hides what those gathers cost where one CTA,
// even with the deep ring, does not (H200, 2026-12-02, docs/inference.md "Which page sizes are
// fast": pages of 64 at b1 kv 128k GQA 32/8, 0.1588 ms at 16 splits, 0.1331 ms at 33).
constexpr int kv_split_slots_per_sm(const KVRowTile& t, int head_dim, int stages, bool paged, int smem_per_sm,
                                    KVLoad load = KVLoad::cp_async) {
  if (!paged) return 1;
  const int resident = smem_per_sm / (kv_smem_bytes(t, head_dim, stages, load) + kKVSmemReservedPerCta);
  const int bound = kv_launch_ctas_per_sm(t, stages);
  return resident < 1 ? 1 : (resident < bound ? resident : bound);
}
// The smaller ring (2 stages, 1 tile in flight while one is computed) for devices whose opt-in
// shared memory per block is below the default ring's CTA: sm86 / sm89 / sm120 allow 101,376 B,
// and d96 / d128 with the 3-stage ring need 102,400 B at 16 rows. 0: none (d256 has 2 already).
constexpr int kv_reduced_stages(int head_dim) { return kv_stages(head_dim) > 2 ? 2 : 0; }
// The rings a row tile has: the default, the reduced one, and the deep one for 16 rows.
constexpr bool kv_stages_valid(const KVRowTile& t, int head_dim, int stages) {
  return stages == kv_stages(head_dim) || (stages != 0 && stages == kv_reduced_stages(head_dim)) ||
         (t.rows == 16 && stages != 0 && stages == kv_deep_stages(head_dim));
}
// The ring kv_cache_plan takes on a device allowing smem_limit bytes per block (opt-in): the
// default when its CTA fits, else the reduced one when that fits; 0 when neither does.
constexpr int kv_stages_within(const KVRowTile& t, int head_dim, int smem_limit, KVLoad load = KVLoad::cp_async) {
  if (kv_smem_bytes(t, head_dim, kv_stages(head_dim), load) <= smem_limit) return kv_stages(head_dim);
  const int reduced = kv_reduced_stages(head_dim);
  if (reduced != 0 && kv_smem_bytes(t, head_dim, reduced, load) <= smem_limit) return reduced;
  return 0;
}
// Why no ring of the row tile fits smem_limit bytes (kv_stages_within == 0), in words; empty
// when one does. kv_cache_plan throws it, forward()'s router reports it and takes the 16-row
// decode kernel instead (cuda_backend.cu: forward_plan).
inline std::string kv_smem_decline_reason(const KVRowTile& t, int head_dim, int smem_limit) {
  if (kv_stages_within(t, head_dim, smem_limit) != 0) return {};
  const int smallest = kv_reduced_stages(head_dim) != 0 ? kv_reduced_stages(head_dim) : kv_stages(head_dim);
  return "the KV-cache kernel's " + std::to_string(t.rows) + "-row tile at head_dim " + std::to_string(head_dim) +
         " needs " + std::to_string(kv_smem_bytes(t, head_dim, smallest)) + " bytes of shared memory with its " +
         std::to_string(smallest) + "-stage ring, over the device's opt-in limit of " + std::to_string(smem_limit) +
         " bytes per block";
}

// How the split partials are merged (kv_cache_combine.cuh):
//   fused:    the last CTA of each (batch, KV head, row block) to finish, found by an atomic
//             arrival counter in the scratch, merges the partials of every split in split order
//             (so the result does not depend on which CTA is last: deterministic, and the same
//             arithmetic as the combine kernel, kv_combine_row) and resets the counter for the
//             next launch. One launch instead of two: the combine kernel's launch and its gap
//             behind the attention kernel are a fixed cost per call of a few microseconds, which
//             is what separates fastattn from cuDNN on small one-token calls (b1, few CTAs;
//             docs/inference-cuda-decode.md). The counters must be zero before a launch: a plan zeroes
//             them once when it is made (runs leave them zero), an eager call zeroes them with
//             a memset node before the attention.
//   separate: the combine kernel (one warp per packed row), launched after the attention.
// The plan takes fused whenever it splits; separate stays for benchmarks and tests
// (KVCacheLaunch::combine) and is the one-line fallback here.
enum class KVCombine { none, fused, separate };
inline KVCombine kv_combine_for(int splits) { return splits > 1 ? KVCombine::fused : KVCombine::none; }
inline const char* kv_combine_text(KVCombine c) {
  return c == KVCombine::fused      ? "partials merged in the attention kernel by the last split to finish"
         : c == KVCombine::separate ? "partials merged by a combine kernel"
                                    : "no partials";
}

// Split partials (kv_cache_combine.cuh): oaccum (splits, batch, kv_heads, rows, head_dim) f32,
// then lseaccum (splits, batch, kv_heads, rows) f32, then the fused combine's arrival counters
// (batch, kv_heads, row blocks) int32, each 256-byte aligned.
inline std::size_t kv_partial_rows(int splits, std::int64_t batch, std::int64_t kv_heads, std::int64_t rows) {
  return static_cast<std::size_t>(splits) * static_cast<std::size_t>(batch) * static_cast<std::size_t>(kv_heads) *
         static_cast<std::size_t>(rows);
}
inline std::size_t kv_lse_offset(int splits, std::int64_t batch, std::int64_t kv_heads, std::int64_t rows,
                                 std::int64_t head_dim) {
  return scratch_align(kv_partial_rows(splits, batch, kv_heads, rows) * static_cast<std::size_t>(head_dim) * 4);
}
inline std::size_t kv_counter_offset(int splits, std::int64_t batch, std::int64_t kv_heads, std::int64_t rows,
                                     std::int64_t head_dim) {
  return kv_lse_offset(splits, batch, kv_heads, rows, head_dim) +
         scratch_align(kv_partial_rows(splits, batch, kv_heads, rows) * 4);
}
inline std::size_t kv_counter_bytes(std::int64_t batch, std::int64_t kv_heads, std::int64_t row_blocks) {
  return static_cast<std::size_t>(batch) * static_cast<std::size_t>(kv_heads) * static_cast<std::size_t>(row_blocks) *
         sizeof(std::int32_t);
}
// row_blocks: ceil(rows / rows per tile), for the counters (0: none counted).
inline std::size_t kv_scratch_bytes(int splits, std::int64_t batch, std::int64_t kv_heads, std::int64_t rows,
                                    std::int64_t head_dim, std::int64_t row_blocks = 0) {
  if (splits <= 1) return 0;
  return kv_counter_offset(splits, batch, kv_heads, rows, head_dim) +
         scratch_align(kv_counter_bytes(batch, kv_heads, row_blocks));
}

// What the split count depends on.
struct KVSplitShape {
  std::int64_t units = 0;  // CTAs before splitting: batch * kv_heads * row blocks
  std::int64_t tiles = 0;  // K/V tiles of the longest visible key range
  int multiprocessors = 0;
  int ctas_per_sm = 1;  // slots per SM the model counts (kv_split_slots_per_sm)
  int forced = 0;       // FASTATTN_CUDA_NUM_SPLITS (0: unset)
};

struct KVSplitChoice {
  int splits = 1;
  double cost = 0;  // in tile-loads per slot
  std::string reason;
};

// The split count (see the head comment), and why, in words.
inline KVSplitChoice choose_kv_splits(const KVSplitShape& s) {
  KVSplitChoice c;
  const std::int64_t slots = static_cast<std::int64_t>(std::max(s.multiprocessors, 1)) * std::max(s.ctas_per_sm, 1);
  const std::string fill = std::to_string(s.units) + " CTAs over (batch, KV head, row block) for " +
                           std::to_string(slots) + " slots (" + std::to_string(std::max(s.multiprocessors, 1)) +
                           " SMs x " + std::to_string(std::max(s.ctas_per_sm, 1)) + ")";
  if (s.forced > 0) {
    c.splits = s.forced;
    c.reason = fill + "; " + std::to_string(s.forced) + " key splits forced by FASTATTN_CUDA_NUM_SPLITS";
    return c;
  }
  auto cost = [&](std::int64_t splits) {
    return static_cast<double>((s.tiles + splits - 1) / splits + kKVCtaOverheadTiles +
                               (splits > 1 ? kKVCombineCostTiles : 0));
  };
  // One wave: at most slots / units splits; at least kKVMinTilesPerSplit tiles each.
  const std::int64_t max_splits =
      s.units > 0 ? std::min<std::int64_t>({kKVMaxSplits, slots / s.units, s.tiles / kKVMinTilesPerSplit}) : 1;
  c.splits = 1;
  c.cost = cost(1);
  for (std::int64_t n = 2; n <= max_splits; ++n) {
    if (cost(n) < c.cost) {
      c.cost = cost(n);
      c.splits = static_cast<int>(n);
    }
  }
  if (c.splits == 1) {
    c.reason = fill + ", " + std::to_string(s.tiles) + " key tiles each: no split" +
               (s.units >= slots ? " (a wave or more already)" : " (too few tiles to share)");
  } else {
    c.reason = fill + ": " + std::to_string(c.splits) + " key splits of <= " +
               std::to_string((s.tiles + c.splits - 1) / c.splits) + " of " + std::to_string(s.tiles) +
               " tiles, one wave (tiles per split + 1 per CTA + 2 for the combine, least)";
  }
  return c;
}

}  // namespace fastattn::cuda
