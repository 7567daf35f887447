// decode_kernel.hpp — the CPU decode kernel: a few query tokens over a long KV cache.
//
// The prefill kernel (forward_kernel.hpp) spends its effort on query blocks: for decode it
// pads one query row to a whole micro-tile, reads K/V once per query head, and converts the
// whole cache to f32 first. Here the unit of work is (sequence b, KV head, row chunk, key split)
// (decode_plan, cpu_backend.hpp; a block of KV heads per unit, see decode_unit), and inside it:
//   rows: the query heads sharing the KV head x the query tokens, packed into one tile
//         row r = chunk * plan.rows + i  ->  token t = r / group, head h = kv_head * group + r % group
//         Q: (rows, dp) f32 (in decode_bf16_split.hpp's column order on AVX-512 bf16), or
//            bf16 pairs (q.k on vdpbf16ps, and the AVX2 emulated path)   dp = head_dim rounded up to 32
//   keys: the split's part of [key_begin(first token), key_end(last token)), in tiles of block_k:
//         K tile: f32 rows staged in L1 (dp floats apart), or read in place as bf16 pairs
//         V tile: f32 rows staged in L1
//         (bf16 on AVX-512: K and V both read in place, widened in registers or taken as bf16
//         pairs by vdpbf16ps, several rows per load: decode_bf16_split.hpp)
//         S (rows, kn) = Q K^T: per row, kWidth keys at a time, each key one accumulator vector,
//                       reduced by V::transpose_sum into one vector of kWidth scores
//         online softmax per row (scores in log2 units, each row's own causal/window interval)
//         O (rows, dp) += P V: register blocks of 4 rows x up to 64 columns
//   so every K/V byte of the split is read from memory once for all its rows, in its dtype.
// Keys come through SequenceKeys (decode_keys.hpp): the forward's K/V, or a KV cache's pages
// (block table, any page size), a tile's row offsets filled page run by page run.
// Each unit writes a partial (out = O / l in f32, lse); a second pass folds the splits of each
// (b, KV head, row chunk) in split order with merge_weights / weighted (inference/
// merge_problem.hpp, the math of merge_states) and writes out and lse in the output dtype.
// Files: decode_tiles.hpp (the pieces both forms share), decode_unit_amx.hpp (the AMX form of a
// unit), this one (the vector form, the merge, the entry point).
#pragma once

#include "cpu/decode_tiles.hpp"  // first: simd.hpp includes <immintrin.h> with a GCC warning workaround
#include "cpu/decode_bf16_split.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <type_traits>

#include "api/host_pool.hpp"
#include "common/mask.hpp"
#include "cpu/amx.hpp"
#include "cpu/decode_unit_amx.hpp"
#include "inference/merge_problem.hpp"

namespace fastattn::cpu::decode_detail {
inline namespace FASTATTN_SIMD_NAMESPACE {

// One work unit: KV heads [kv0, kv0 + plan.heads_per_unit) of sequence b, rows of one chunk,
// keys of one split. Partial out (heads, rows, dp) f32 and lse (heads, rows). The heads are the
// inner loop of each key tile: a tile of every head is one contiguous stretch of the caller's
// [tokens, kv_heads, head_dim] K and V, read front to back (one head's rows alone sit a token
// stride apart, one or two to a page, and cost a page walk each on this VM: 2x slower).
template <class V, DecodeForm kForm>
void decode_unit(const AttentionProblem& p, const DecodeKeys* cache, const DecodePlan& plan, const DecodeGeometry& g,
                 const DecodeScratch& s, std::int64_t b, std::int64_t kv0, std::int64_t chunk, std::int64_t split,
                 float* part_out, float* part_lse) {
  // bf16_widened (AVX-512): K and V read in place and widened in registers, f32 FMAs for both
  // products, several rows per K/V load (decode_bf16_split.hpp). Q is then f32 in the split
  // layout. bf16_dot: both products on vdpbf16ps, Q as bf16 pairs (rows of dp words), P rounded
  // to bf16 for P V over key pairs (O in the pair order), and the next tile's prefetches spread
  // through the products. bf16_pairs (AVX2, a test path): q.k on bf16 pairs, V staged to f32.
  static_assert(kForm != DecodeForm::amx, "the AMX form runs decode_unit_amx");
  constexpr bool kDot = kForm == DecodeForm::bf16_dot;
  constexpr bool kSplit = kForm == DecodeForm::bf16_widened || kDot;  // score_split: K read in place
  constexpr bool kPairs = kForm == DecodeForm::bf16_pairs;
  constexpr ColumnOrder kOrder = kDot ? ColumnOrder::pairs : kSplit ? ColumnOrder::split : ColumnOrder::natural;
  // Where the next key tile's L2 prefetches go. bf16_dot: a key's rows at a time inside the
  // products (its K rows while S is formed, its V rows during P V), so that the line fill
  // buffers never fill and memory streams while the core computes; measured on AMD Zen 4, 1.5x
  // on the one-token row against one burst per head after its products, and with this form on
  // Sapphire Rapids (twenty-third session: 1.48-1.58x the widened form on the 2-core VM, 1.12x
  // on the 16-core host; docs/inference-cpu-decode.md). The other forms keep that burst: on the Sapphire
  // Rapids VM, 2026-12-02, prefetches spread through the widened form's products were slower
  // than it (docs/inference-cpu-decode.md, "What did not help").
  constexpr bool kSpreadPrefetch = kDot;
  static_assert(kDecodeMaxRows <= 2 * 32, "bf16_dot keeps P's bf16 rows (rows x bk words) in K's f32 tile (bk x dp)");
  static_assert(!kSplit || V::kWidth == 16, "the widened and vdpbf16ps forms are AVX-512's");
  const UnitRows ur = unit_rows(p, plan, b, chunk);
  if (ur.rows == 0) return;
  const std::int64_t heads = std::min(plan.heads_per_unit, p.num_kv_heads - kv0);
  const std::int64_t group = p.group_size(), d = p.head_dim, dp = g.dp;
  const SequenceKeys keys(p, cache, b);
  const std::int64_t len_q = p.q_len(b), len_k = keys.length();
  const SequenceMask mask = p.mask_for(len_q, len_k);
  const std::int64_t t_first = ur.r0 / group, t_last = (ur.r0 + ur.rows - 1) / group;
  const std::int64_t kb = mask.key_begin(t_first), ke = std::max(kb, mask.key_end(t_last + 1));
  const std::int64_t per = round_up((ke - kb + plan.splits - 1) / plan.splits, 16);
  const std::int64_t k_begin = std::min(ke, kb + split * per), k_end = std::min(ke, k_begin + per);

  // Q rows of every head (state row x = head offset * g.rows + i); padding columns stay 0 from
  // the scratch's first zeroing.
  const std::size_t elem = elem_bytes(p.dtype);
  const char* qbase = static_cast<const char*>(p.q.data);
  for (std::int64_t hh = 0; hh < heads; ++hh) {
    for (std::int64_t i = 0; i < ur.rows; ++i) {
      const std::int64_t x = hh * g.rows + i;
      const std::int64_t r = ur.r0 + i, t = r / group, h = (kv0 + hh) * group + r % group;
      const char* src = qbase + static_cast<std::size_t>(p.offset_q(p.q, b, t, h)) * elem;
      if constexpr (kDot || kPairs) {
        std::memcpy(reinterpret_cast<std::uint16_t*>(s.q) + x * dp, src, static_cast<std::size_t>(d) * 2);
      } else if constexpr (kSplit) {
        const auto* words = reinterpret_cast<const std::uint16_t*>(src);
        for (std::int64_t c = 0; c < d; ++c) {  // bf16 -> f32: the bits shifted up
          const std::uint32_t bits = static_cast<std::uint32_t>(words[c]) << 16;
          std::memcpy(s.q + x * dp + c / 32 * 32 + split_position(c % 32), &bits, 4);
        }
      } else {
        simd::load_row<V>(src, p.dtype, d, 1.0f, s.q + x * dp);
      }
      simd::zero_row<V>(s.acc + x * dp, dp);
      s.row_max[x] = -std::numeric_limits<float>::infinity();
      s.row_sum[x] = 0.0f;
    }
  }

  const float scale = p.softcap > 0.0f ? p.softmax_scale / p.softcap : p.softmax_scale * kLog2e;
  const float cap = p.softcap > 0.0f ? p.softcap * kLog2e : 0.0f;
  const char* kdata = static_cast<const char*>(p.k.data);
  const char* vdata = static_cast<const char*>(p.v.data);

  TileRows tr;
  int cur = 0;
  if (k_begin < k_end) keys.rows(k_begin, std::min(g.bk, k_end - k_begin), tr.k[cur], tr.v[cur]);
  for (std::int64_t k0 = k_begin; k0 < k_end; k0 += g.bk) {
    const std::int64_t kn = std::min(g.bk, k_end - k0);
    const std::int64_t next = std::min(g.bk, k_end - k0 - kn);
    if (next > 0) keys.rows(k0 + kn, next, tr.k[1 - cur], tr.v[1 - cur]);
    const std::int64_t* k_off = tr.k[cur];
    const std::int64_t* v_off = tr.v[cur];
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      const std::int64_t kh = kv0 + hh;
      const char* k_head = kdata + static_cast<std::size_t>(kh * p.k.stride.head) * elem;
      const char* v_head = vdata + static_cast<std::size_t>(kh * p.v.stride.head) * elem;
      NextRows k_next, v_next;  // the next tile's rows of this head, prefetched during its products (bf16_dot)
      if (kSpreadPrefetch && next > 0) {
        k_next = {reinterpret_cast<const std::uint16_t*>(k_head), tr.k[1 - cur], d, 0, next};
        v_next = {reinterpret_cast<const std::uint16_t*>(v_head), tr.v[1 - cur], d, 0, next};
      }
      if constexpr (kSplit) {  // S of all rows at once (Q's type picks the form); V is read in place by
                               // pv_split (pv_pairs under bf16_dot)
        using QWord = std::conditional_t<kDot, std::uint16_t, float>;  // bf16 words for vdpbf16ps, else f32
        score_split<V>(ur.rows, reinterpret_cast<const QWord*>(s.q) + hh * g.rows * dp, dp,
                       reinterpret_cast<const std::uint16_t*>(k_head), k_off, d, kn, s.scores, g.bk,
                       k_next.left > 0 ? &k_next : nullptr);
      } else {
        for (std::int64_t j = 0; j < kn; ++j) {
          simd::load_row<V>(v_head + static_cast<std::size_t>(v_off[j]) * elem, p.dtype, d, 1.0f, s.v_tile + j * dp);
          if constexpr (!kPairs) {
            simd::load_row<V>(k_head + static_cast<std::size_t>(k_off[j]) * elem, p.dtype, d, 1.0f,
                              s.k_tile + j * dp);
          }
        }
      }
      for (std::int64_t i = 0; i < ur.rows; ++i) {
        const std::int64_t x = hh * g.rows + i;
        const std::int64_t t = (ur.r0 + i) / group;
        const std::int64_t lo = std::max<std::int64_t>(mask.key_begin(t) - k0, 0);
        const std::int64_t hi = std::min<std::int64_t>(mask.key_end(t + 1) - k0, kn);
        float* srow = s.scores + i * g.bk;
        if (lo >= hi) {  // no key of this tile is visible to the row: P row 0
          std::memset(srow, 0, static_cast<std::size_t>(kn) * sizeof(float));
          continue;
        }
        if constexpr (kSplit) {
          // scored above
        } else if constexpr (kPairs) {
          score_row_pairs<V, false>(reinterpret_cast<const std::uint16_t*>(s.q) + x * dp,
                                                      reinterpret_cast<const std::uint16_t*>(k_head), k_off, d, kn,
                                                      srow);
        } else {
          score_row_f32<V>(s.q + x * dp, s.k_tile, dp, kn, srow);
        }
        const float alpha = softmax_row<V>(srow, kn, lo, hi, scale, cap, s.row_max[x], s.row_sum[x]);
        if (alpha != 1.0f) simd::scale_row<V>(s.acc + x * dp, dp, alpha);
      }
      if constexpr (kDot) {
        auto* p_words = reinterpret_cast<std::uint16_t*>(s.k_tile);  // (rows, bk) bf16: K's f32 tile is not used here
        round_p_to_bf16(ur.rows, s.scores, g.bk, p_words, g.bk, kn);
        pv_pairs<V>(ur.rows, s.acc + hh * g.rows * dp, dp, p_words, g.bk,
                    reinterpret_cast<const std::uint16_t*>(v_head), v_off, d, kn, v_next.left > 0 ? &v_next : nullptr);
      } else if constexpr (kSplit) {
        pv_split<V>(ur.rows, s.acc + hh * g.rows * dp, dp, s.scores, g.bk, reinterpret_cast<const std::uint16_t*>(v_head),
                    v_off, d, kn);
      } else {
        accumulate_pv<V>(s.acc + hh * g.rows * dp, ur.rows, dp, s.scores, g.bk, s.v_tile, kn);
      }
      if (next > 0 && !kSpreadPrefetch) {
        const std::int64_t row_bytes = d * static_cast<std::int64_t>(elem);
        prefetch_rows(k_head, tr.k[1 - cur], elem, next, row_bytes);
        prefetch_rows(v_head, tr.v[1 - cur], elem, next, row_bytes);
      }
    }
    cur = 1 - cur;
  }

  write_partials<V>(s, heads, g.rows, ur.rows, d, dp, part_out, part_lse, kOrder);
}


// Folds the splits of (b, kv_head, chunk) in split order with merge_states' weights and writes
// out (output dtype) and lse. tmp: head_dim floats.
template <class V>
void merge_and_write(const AttentionProblem& p, const DecodePlan& plan, const DecodeGeometry& g, std::int64_t b,
                     std::int64_t kv_head, std::int64_t chunk, const float* parts_out, const float* parts_lse,
                     float* tmp, bool out_f32 = false) {
  const UnitRows ur = unit_rows(p, plan, b, chunk);
  const std::int64_t group = p.group_size(), d = p.head_dim;
  const std::int64_t block = kv_head / plan.heads_per_unit, hh = kv_head % plan.heads_per_unit;
  const std::int64_t first_unit = ((b * plan.head_blocks + block) * plan.row_chunks + chunk) * plan.splits;
  const DType out_dtype = out_f32 ? DType::f32 : p.dtype;  // f32: the cooperative step's partials
  const std::size_t elem = elem_bytes(out_dtype);
  char* out = static_cast<char*>(p.out.data);
  for (std::int64_t i = 0; i < ur.rows; ++i) {
    const std::int64_t r = ur.r0 + i, t = r / group, h = kv_head * group + r % group;
    float lse = -std::numeric_limits<float>::infinity();
    simd::zero_row<V>(tmp, d);
    for (std::int64_t sp = 0; sp < plan.splits; ++sp) {
      const std::int64_t row = ((first_unit + sp) * plan.heads_per_unit + hh) * g.rows + i;
      const MergeWeights<float> w = merge_weights(lse, parts_lse[row]);
      const float* o = parts_out + row * g.dp;
      if (w.weight_b == 0.0f && w.weight_a == 1.0f) continue;  // the split adds nothing
      for (std::int64_t c = 0; c < d; ++c) tmp[c] = weighted(w.weight_a, tmp[c]) + weighted(w.weight_b, o[c]);
      lse = w.lse;
    }
    simd::store_row<V>(tmp, 1.0f, out_dtype, d, out + static_cast<std::size_t>(p.offset_q(p.out, b, t, h)) * elem);
    if (p.lse) p.lse_row(b, h)[t * p.lse_token_stride] = lse;
  }
}

// Entry point of one ISA and dot-product form: all units over OpenMP threads, then the merge.
// The AMX tile configuration for the life of a thread's share of the call (nothing for void).
template <class E>
struct TileScopeFor {
  amx::TileScope<E> scope{amx::gemm_config()};
};
template <>
struct TileScopeFor<void> {};

// Amx: void (vector dot products) or an amx engine (amx::Native / amx::Emulated).
// cache: a KV cache's pages and lengths (null: p's K/V). buffers: the caller's scratch
// (decode_scratch_size), or null members to take it from the host pools.
// kForm: the plan's form (DecodeForm::amx with an Amx engine).
template <class V, DecodeForm kForm, class Amx = void>
void run_decode(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                const DecodeBuffers& buffers) {
  if (p.batch == 0 || p.num_heads == 0 || p.seqlen_q == 0) return;
  constexpr bool kAmx = !std::is_void_v<Amx>;
  static_assert(kAmx == (kForm == DecodeForm::amx), "an Amx engine exactly for the AMX form");
  const DecodeGeometry g = decode_geometry(p, plan);
  const DecodeScratchSize size = decode_scratch_size(p, plan);
  const std::int64_t units = p.batch * plan.head_blocks * plan.row_chunks * plan.splits;
  const std::int64_t seq_units = p.batch * p.num_kv_heads * plan.row_chunks;  // merged rows' owners
  const std::int64_t unit_rows_all = plan.heads_per_unit * g.rows;
  const std::size_t part_rows = static_cast<std::size_t>(units * unit_rows_all);
  std::optional<HostScratch> pooled;
  float* parts_out = buffers.parts;
  if (parts_out == nullptr) {
    pooled.emplace(nullptr, size.parts_bytes);
    parts_out = static_cast<float*>(pooled->data());
  }
  float* parts_lse = parts_out + part_rows * static_cast<std::size_t>(g.dp);

  std::exception_ptr error;
#pragma omp parallel num_threads(plan.threads)
  {
    float* scratch = nullptr;
    try {
      scratch = buffers.threads != nullptr
                    ? buffers.threads + static_cast<std::size_t>(omp_get_thread_num()) * (size.thread_bytes / sizeof(float))
                    : static_cast<float*>(thread_scratch(size.thread_bytes));
      std::memset(scratch, 0, size.thread_bytes);
    } catch (...) {
#pragma omp critical(fastattn_decode_error)
      if (!error) error = std::current_exception();
    }
    const DecodeScratch s = scratch ? carve(g, scratch) : DecodeScratch{};
    [[maybe_unused]] const TileScopeFor<Amx> tiles;  // ldtilecfg per thread and call
    // Units: (b, head block, chunk) outermost, splits innermost.
#pragma omp for schedule(dynamic)
    for (std::int64_t u = 0; u < units; ++u) {
      if (!scratch) continue;
      const std::int64_t split = u % plan.splits, su = u / plan.splits;
      const std::int64_t chunk = su % plan.row_chunks, bh = su / plan.row_chunks;
      const std::int64_t block = bh % plan.head_blocks, b = bh / plan.head_blocks;
      if constexpr (kAmx) {
        decode_unit_amx<V, Amx>(p, cache, plan, g, s, b, block * plan.heads_per_unit, chunk, split,
                                parts_out + u * unit_rows_all * g.dp, parts_lse + u * unit_rows_all);
      } else {
        decode_unit<V, kForm>(p, cache, plan, g, s, b, block * plan.heads_per_unit, chunk, split,
                             parts_out + u * unit_rows_all * g.dp, parts_lse + u * unit_rows_all);
      }
    }
#pragma omp for schedule(static)
    for (std::int64_t su = 0; su < seq_units; ++su) {
      if (!scratch) continue;
      const std::int64_t chunk = su % plan.row_chunks, bh = su / plan.row_chunks;
      merge_and_write<V>(p, plan, g, bh / p.num_kv_heads, bh % p.num_kv_heads, chunk, parts_out, parts_lse,
                         s.k_tile, cache != nullptr && cache->out_f32);
    }
  }
  if (error) std::rethrow_exception(error);
}


}  // namespace FASTATTN_SIMD_NAMESPACE
}  // namespace fastattn::cpu::decode_detail
