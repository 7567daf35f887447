// forward_kernel.hpp — the CPU FlashAttention-2 forward pass, templated on the SIMD traits.
//
// Work unit = (query head h, batch b, query block of block_q rows); units are spread over
// OpenMP threads through a UnitQueue (unit_queue.hpp: a contiguous range per thread, the rest
// taken by whoever is done first), so one long sequence with few heads still fills every core
// and a thread's consecutive units share their head's K/V in its L2. K and V are first made contiguous f32 rows per KV head (forward_kv.hpp).
// Two levels of tiling (FastAttention): the unit's Q^T and O stay in L2 and share every K/V
// tile read for them; inside the unit, sub-blocks of sub_q rows keep their score tile in L1.
// How Q, K and V are stored and multiplied is the Ops policy's job (forward_f32.hpp: f32
// operands, FMA micro-kernels; forward_bf16.hpp: bf16 pairs, vdpbf16ps); this file is the
// driver both share: work units, tiling, tiling-mask, online softmax, epilogue.
// Per unit (forward_query_block), with the f32 operands:
//   1. pack_query_block, per sub-block: Q rows -> f32, times softmax_scale * log2(e) (or
//      scale / softcap), stored transposed as GEMM B panels   q_panels: (head_dim, cols) f32
//   2. for each tile of block_k keys in [mask.key_begin(q0), mask.key_end(q1)), and each
//      sub-block, classified by SequenceMask::classify (empty: skipped, full: no mask math,
//      partial: masked), attend_tile:
//        S^T = K_tile Q^T                                   scores: (kn, cols) f32
//        soft-cap, mask, online softmax (forward_softmax.hpp), rescale O rows whose max moved
//        O += P V_tile (P read in place from S^T)           acc: (acc_rows, head_dim) f32
//      K_tile, V_tile: (kn, head_dim) f32 rows read in place from the contiguous K/V.
//   3. write_output_rows (epilogue): out = O / l in the output dtype, lse = (m + log2 l) ln 2.
// Scores are kept transposed (keys x queries) so the softmax statistics are per-lane vectors;
// both products run on the register-blocked micro-kernels of tile_gemm.hpp.
//
// Padding: a sub-block of `rows` queries computes acc_rows = round_up(rows, kGemmRows) rows of
// O and cols = round_up(acc_rows, panel width) score columns; padded query columns have zero Q
// (finite scores) and are never written out.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <type_traits>

#include "cpu/simd.hpp"  // first: it includes <immintrin.h> with a GCC warning workaround
#include "api/host_pool.hpp"
#include "common/mask.hpp"
#include "common/problem.hpp"
#include "cpu/forward_isa.hpp"
#include "cpu/forward_kv.hpp"
#include "cpu/forward_softmax.hpp"
#include "cpu/tile_gemm.hpp"
#include "cpu/unit_queue.hpp"

namespace fastattn::cpu::forward_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2 = 0.693147180559945309f;

constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
constexpr std::int64_t gcd(std::int64_t a, std::int64_t b) { return b == 0 ? a : gcd(b, a % b); }

// Tile sizes of one call and the per-thread scratch they need. block_q and block_k come from
// the dispatcher (cpu_forward_tiles); 0 picks the defaults below.
template <class V>
struct ForwardGeometry {
  static constexpr std::int64_t kRows = V::kGemmRows;             // micro-kernel rows
  static constexpr std::int64_t kPanel = gemm::panel_width<V>();  // micro-kernel columns
  static constexpr std::int64_t kQueryAlign = kRows / gcd(kRows, kPanel) * kPanel;  // lcm
  static constexpr std::int64_t kMaxSubBlocks = 16;
  static constexpr std::int64_t kScoreTileBytes = 24 * 1024;  // fits L1 beside a B panel

  std::int64_t head_dim = 0;
  std::int64_t block_q = 0;   // query rows per work unit
  std::int64_t block_k = 0;   // keys per tile
  std::int64_t sub_q = 0;     // query rows per sub-block, a multiple of kQueryAlign
  std::int64_t max_subs = 0;  // sub-blocks per work unit, <= kMaxSubBlocks

  ForwardGeometry(std::int64_t d, int bq, int bk)
      : head_dim(d), block_q(bq > 0 ? bq : 2 * kQueryAlign), block_k(bk > 0 ? bk : 8 * kRows) {
    std::int64_t sub = kScoreTileBytes / static_cast<std::int64_t>(sizeof(float)) / block_k;
    sub = sub / kQueryAlign * kQueryAlign;
    if (sub < kQueryAlign) sub = kQueryAlign;
    const std::int64_t fewest =
        round_up((block_q + kMaxSubBlocks - 1) / kMaxSubBlocks, kQueryAlign);
    if (sub < fewest) sub = fewest;
    const std::int64_t whole = round_up(block_q, kQueryAlign);
    sub_q = sub < whole ? sub : whole;
    max_subs = (block_q + sub_q - 1) / sub_q;
  }

  // Floats of each scratch region, rounded to whole cache lines.
  static std::int64_t lines(std::int64_t floats) { return round_up(floats, 16); }
  std::int64_t q_panel_floats() const { return lines(max_subs * head_dim * sub_q); }
  std::int64_t acc_floats() const { return lines(max_subs * sub_q * head_dim); }
  std::int64_t score_floats() const { return lines(block_k * sub_q); }
  std::int64_t stat_floats() const { return lines(max_subs * sub_q); }
  // bf16 operands: key pairs of a tile, rounded up to whole 16-row AMX tiles.
  std::int64_t pair_floats() const { return lines(round_up(block_k / 2 + 1, 16) * sub_q); }
  std::size_t scratch_bytes() const {
    const std::int64_t floats =
        q_panel_floats() + acc_floats() + score_floats() + 3 * stat_floats() + pair_floats();
    return static_cast<std::size_t>(floats) * sizeof(float);
  }
};

// One thread's scratch, carved from thread_scratch(), all f32:
struct ForwardScratch {
  float* q_panels;  // per sub-block i, at i * head_dim * sub_q: (head_dim, cols) B panels
  float* acc;       // (block_q, head_dim) row-major: O; first the sub-block's f32 Q rows
  float* scores;    // (block_k, cols) row-major: S^T of the current sub-block, then P^T
  float* row_max;   // (block_q): running max m, log2 units
  float* row_sum;   // (block_q): running sum l
  float* alpha;     // (block_q): the current tile's rescale factor
  float* pairs;     // bf16 operands only: (block_k / 2 + 1, cols) words, P as key pairs
};

template <class V>
ForwardScratch carve_scratch(const ForwardGeometry<V>& g, float* base) {
  ForwardScratch s{};
  s.q_panels = base;
  s.acc = s.q_panels + g.q_panel_floats();
  s.scores = s.acc + g.acc_floats();
  s.row_max = s.scores + g.score_floats();
  s.row_sum = s.row_max + g.stat_floats();
  s.alpha = s.row_sum + g.stat_floats();
  s.pairs = s.alpha + g.stat_floats();
  return s;
}

// One sub-block of a work unit: queries [q0, q0 + rows) of one head, with its slices of the
// thread's scratch.
struct SubBlock {
  std::int64_t q0, rows, acc_rows, cols;
  const float* q_panels;  // (head_dim, cols) B panels
  float* acc;             // (acc_rows, head_dim)
  float* row_max;         // (cols)
  float* row_sum;         // (cols)
  float* alpha;           // (cols)
};

// O row i *= alpha[i] where the running max moved (alpha != 1). Rows that had seen no key
// yet hold zeros, so their alpha of 0 needs no special case.
template <class V>
void rescale_accumulator(float* acc, std::int64_t head_dim, std::int64_t acc_rows,
                         const float* alpha) {
  for (std::int64_t i = 0; i < acc_rows; ++i) {
    if (alpha[i] != 1.0f) simd::scale_row<V>(acc + i * head_dim, head_dim, alpha[i]);
  }
}

// Epilogue: out row = O / l in the output dtype, lse = (m + log2 l) * ln 2 (natural log).
// A row that saw no visible key (l = 0) gets out = 0 and lse = -inf.
template <class V>
void write_output_rows(const AttentionProblem& p, const ForwardScratch& s, std::int64_t b,
                       std::int64_t h, std::int64_t q0, std::int64_t rows) {
  const std::int64_t d = p.head_dim;
  const std::size_t elem = element_bytes(p.dtype);
  char* out = static_cast<char*>(p.out.data);
  float* lse = p.lse ? p.lse_row(b, h) : nullptr;
  for (std::int64_t i = 0; i < rows; ++i) {
    float* o = s.acc + i * d;
    char* dst = out + static_cast<std::size_t>(p.offset_q(p.out, b, q0 + i, h)) * elem;
    const float l = s.row_sum[i];
    float row_lse;
    if (l == 0.0f) {
      simd::zero_row<V>(o, d);
      simd::store_row<V>(o, 1.0f, p.dtype, d, dst);
      row_lse = -std::numeric_limits<float>::infinity();
    } else {
      simd::store_row<V>(o, 1.0f / l, p.dtype, d, dst);
      row_lse = (s.row_max[i] + std::log2(l)) * kLn2;
    }
    if (lse) lse[(q0 + i) * p.lse_token_stride] = row_lse;
  }
}

// Ops that keep O transposed, (head_dim, cols) per sub-block (forward_amx.hpp), say so with
// kAccTransposed = true and provide zero_accumulator and write_sub_block.
template <class Ops, class = void>
struct AccTransposed : std::false_type {};
template <class Ops>
struct AccTransposed<Ops, std::void_t<decltype(Ops::kAccTransposed)>> : std::bool_constant<Ops::kAccTransposed> {};

// The whole forward of one work unit: queries [q0, q0 + rows) of (sequence b, head h).
template <class V, class Ops>
void forward_query_block(const AttentionProblem& p, const ForwardGeometry<V>& g,
                         const ForwardScratch& s, const typename Ops::Kv& kv, std::int64_t b,
                         std::int64_t h, std::int64_t q0, std::int64_t rows, std::int64_t len_q,
                         std::int64_t len_k) {
  using G = ForwardGeometry<V>;
  const std::int64_t d = p.head_dim;
  const float q_scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : p.softmax_scale * kLog2e;

  // Outer level: pack Q^T and clear O and the statistics of every sub-block.
  SubBlock subs[G::kMaxSubBlocks];
  const std::int64_t n_subs = (rows + g.sub_q - 1) / g.sub_q;
  for (std::int64_t i = 0; i < n_subs; ++i) {
    SubBlock& sb = subs[i];
    const std::int64_t r0 = i * g.sub_q;
    float* panels = s.q_panels + i * d * g.sub_q;
    sb.q0 = q0 + r0;
    sb.rows = rows - r0 < g.sub_q ? rows - r0 : g.sub_q;
    if constexpr (AccTransposed<Ops>::value) {
      sb.acc_rows = sb.cols = round_up(sb.rows, Ops::kColumnAlign);
    } else {
      sb.acc_rows = round_up(sb.rows, G::kRows);
      sb.cols = round_up(sb.acc_rows, G::kPanel);
    }
    sb.q_panels = panels;
    sb.acc = s.acc + r0 * d;
    sb.row_max = s.row_max + r0;
    sb.row_sum = s.row_sum + r0;
    sb.alpha = s.alpha + r0;
    Ops::pack_query_block(p, b, h, sb.q0, sb.rows, sb.cols, q_scale, sb.acc, panels);
    if constexpr (AccTransposed<Ops>::value) {
      Ops::zero_accumulator(sb.acc, d, sb.cols);
    } else {
      for (std::int64_t r = 0; r < sb.acc_rows; ++r) simd::zero_row<V>(sb.acc + r * d, d);
    }
    for (std::int64_t c = 0; c < sb.cols; ++c) {
      sb.row_max[c] = -std::numeric_limits<float>::infinity();
      sb.row_sum[c] = 0.0f;
    }
  }

  const SequenceMask mask = p.mask_for(len_q, len_k);
  const std::int64_t kv_head = h / p.group_size();
  const std::int64_t key_end = mask.key_end(q0 + rows);
  for (std::int64_t k0 = mask.key_begin(q0); k0 < key_end; k0 += g.block_k) {
    const std::int64_t kn = key_end - k0 < g.block_k ? key_end - k0 : g.block_k;
    // Inner level: each sub-block against the part of this K/V tile inside its own key range
    // (so diagonal and window edges waste no more than the sub-block's own triangle),
    // classified on its own rows.
    for (std::int64_t i = 0; i < n_subs; ++i) {
      const SubBlock& sb = subs[i];
      const std::int64_t sb_begin = mask.key_begin(sb.q0), sb_end = mask.key_end(sb.q0 + sb.rows);
      const std::int64_t k_lo = k0 > sb_begin ? k0 : sb_begin;
      const std::int64_t k_hi = k0 + kn < sb_end ? k0 + kn : sb_end;
      if (k_lo >= k_hi) continue;
      const TileClass tile = mask.classify(sb.q0, sb.q0 + sb.rows, k_lo, k_hi);
      if (tile == TileClass::empty) continue;
      Ops::attend_tile(p, sb, s, kv, b, kv_head, q_scale, mask, k_lo, k_hi - k_lo, tile);
    }
  }
  if constexpr (AccTransposed<Ops>::value) {
    // Q^T is no longer needed: each sub-block's panels hold its output rows on the way out.
    for (std::int64_t i = 0; i < n_subs; ++i) Ops::write_sub_block(p, subs[i], s.q_panels + i * d * g.sub_q, b, h);
  } else {
    write_output_rows<V>(p, s, b, h, q0, rows);
  }
}

// Entry point of one ISA and operand format: all work units of the call over OpenMP threads.
template <class V, class Ops>
void run_forward(const AttentionProblem& p, const ForwardTiles& tiles) {
  if (p.batch == 0 || p.num_heads == 0 || p.seqlen_q == 0) return;
  const ForwardGeometry<V> g(p.head_dim, tiles.block_q, tiles.block_k);
  const typename Ops::Plan plan(p);
  HostScratch packed(nullptr, plan.chunk_bytes);  // pooled; nothing when K/V are read in place
  const std::int64_t q_blocks = (p.seqlen_q + g.block_q - 1) / g.block_q;
  const std::int64_t group = p.group_size();
  const int threads = tiles.num_threads > 0 ? tiles.num_threads : omp_get_max_threads();
  const std::size_t scratch_bytes = g.scratch_bytes();

  std::exception_ptr error;
  UnitQueue queue;
#pragma omp parallel num_threads(threads)
  {
    float* scratch = nullptr;
    try {
      scratch = static_cast<float*>(thread_scratch(scratch_bytes));
    } catch (...) {
#pragma omp critical(fastattn_forward_error)
      if (!error) error = std::current_exception();
    }
    const ForwardScratch s = scratch ? carve_scratch(g, scratch) : ForwardScratch{};
    for (std::int64_t c0 = 0; c0 < p.num_kv_heads; c0 += plan.heads_per_chunk) {
      const std::int64_t c1 =
          c0 + plan.heads_per_chunk < p.num_kv_heads ? c0 + plan.heads_per_chunk : p.num_kv_heads;
      const typename Ops::Kv kv = Ops::stage_kv(p, plan, c0, c1, packed.data());
      // Units of the query heads of KV heads [c0, c1): (head, batch, query block), heads
      // outermost so that consecutive units share K/V; within a sequence the longest query
      // blocks (last, under a causal mask) first, which keeps the tail of the schedule short.
      const std::int64_t units = (c1 - c0) * group * p.batch * q_blocks;
      const auto run_unit = [&](std::int64_t u) {
        const std::int64_t seq_unit = u / q_blocks;  // (head, batch) pair
        const std::int64_t qb = q_blocks - 1 - u % q_blocks;
        const std::int64_t h = c0 * group + seq_unit / p.batch;
        const std::int64_t b = seq_unit % p.batch;
        const std::int64_t len_q = p.q_len(b);
        const std::int64_t q0 = qb * g.block_q;
        if (q0 >= len_q) return;  // varlen: this sequence is shorter than the longest
        const std::int64_t rows = len_q - q0 < g.block_q ? len_q - q0 : g.block_q;
        forward_query_block<V, Ops>(p, g, s, kv, b, h, q0, rows, len_q, p.k_len(b));
      };
#pragma omp single
      queue.reset(units, omp_get_num_threads());
      if (scratch) {
        const int t = omp_get_thread_num();
        for (std::int64_t u = queue.next(t); u >= 0; u = queue.next(t)) run_unit(u);
      }
#pragma omp barrier  // the next chunk's staging overwrites this chunk's K/V
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::forward_detail
