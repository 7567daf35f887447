// decode_keys.hpp — where the CPU decode kernel (decode_kernel.hpp) finds the keys of a
// sequence: the forward's K/V (padded batch or varlen), or a KV cache whose tokens sit in pages
// reached through a block table (inference/kv_cache_problem.hpp). Plain C++, no SIMD.
//
// The kernel asks for a block of keys [k0, k0 + n) of sequence b at a time (one key tile) and
// gets the element offsets of their K and V rows (head 0) from p.k.data / p.v.data. A paged
// block is filled page run by page run (one block-table read and one division per page, not
// per key), so pages of >= 16 tokens cost one lookup per 16+ rows; RowRuns says whether the
// block's rows are one stride apart (inside one page, or pages that follow each other in
// memory), or at least each aligned group of 16 rows is (pages of a multiple of 16 tokens),
// which lets the AMX form read K in place, a whole tile or a 16-row tile at a time, instead of
// staging it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/problem.hpp"
#include "inference/kv_cache_problem.hpp"

namespace fastattn::cpu {

// The KV cache's page indirection and lengths, for a KVCacheProblem (null for forward()).
struct DecodeKeys {
  const std::int32_t* block_table = nullptr;  // null: contiguous cache, page of sequence b = b
  std::int64_t block_table_stride = 0;
  std::int64_t page_size = 0;
  std::int64_t num_pages = 0;
  std::int64_t k_page_stride = 0, v_page_stride = 0;
  const std::int32_t* seqlens = nullptr;  // tokens in the cache before the append
  std::int64_t seqlen_new = 0;            // appended tokens (already written)
  std::int64_t capacity = 0;              // tokens a sequence can hold
  bool out_f32 = false;                   // KVCacheProblem::out_f32: the merge writes out in f32

  static DecodeKeys of(const KVCacheProblem& p) {
    DecodeKeys k;
    k.block_table = p.block_table;
    k.block_table_stride = p.block_table_stride;
    k.page_size = p.page_size;
    k.num_pages = p.num_pages;
    k.k_page_stride = p.k_page_stride;
    k.v_page_stride = p.v_page_stride;
    k.seqlens = p.seqlens;
    k.seqlen_new = p.seqlen_new;
    k.capacity = p.capacity();
    k.out_f32 = p.out_f32;
    return k;
  }

  // Keys of sequence b: seqlens[b] + seqlen_new, clamped to [0, capacity] so that a plan's
  // run (which does not check values) never reads outside the cache.
  std::int64_t length(std::int64_t b) const {
    if (block_table != nullptr && num_pages < 1) return 0;  // no page to read
    const std::int64_t n = static_cast<std::int64_t>(seqlens[b]) + seqlen_new;
    return std::clamp<std::int64_t>(n, 0, capacity);
  }
  // Page of block-table slot `slot` of sequence b, clamped to [0, num_pages) likewise.
  std::int64_t page(std::int64_t b, std::int64_t slot) const {
    if (block_table == nullptr) return b;
    const std::int64_t page = block_table[b * block_table_stride + slot];
    return std::clamp<std::int64_t>(page, 0, num_pages - 1);
  }
};

// How a block's rows lie (SequenceKeys::rows).
struct RowRuns {
  bool uniform = true;    // all rows one token stride apart
  bool uniform16 = true;  // each group of 16 rows [16 g, 16 g + 16) one token stride apart
};

// The keys of one sequence of a problem.
class SequenceKeys {
 public:
  SequenceKeys(const AttentionProblem& p, const DecodeKeys* cache, std::int64_t b)
      : cache_(cache), b_(b), k_token_(p.k.stride.token), v_token_(p.v.stride.token) {
    if (cache_ != nullptr) {
      length_ = cache_->length(b);
      paged_ = cache_->block_table != nullptr;
      k_base_ = b * cache_->k_page_stride;  // contiguous cache: page b
      v_base_ = b * cache_->v_page_stride;
    } else {
      length_ = p.k_len(b);
      k_base_ = p.offset_k(p.k, b, 0, 0);
      v_base_ = p.offset_k(p.v, b, 0, 0);
    }
  }

  std::int64_t length() const { return length_; }

  // Element offsets of the K and V rows (head 0) of keys [k0, k0 + n), n >= 1, all below
  // length(), and whether both are one token stride apart.
  RowRuns rows(std::int64_t k0, std::int64_t n, std::int64_t* k_off, std::int64_t* v_off) const {
    if (!paged_) {
      for (std::int64_t j = 0; j < n; ++j) {
        k_off[j] = k_base_ + (k0 + j) * k_token_;
        v_off[j] = v_base_ + (k0 + j) * v_token_;
      }
      return {};
    }
    const std::int64_t page_size = cache_->page_size;
    RowRuns runs;
    std::int64_t j = 0, t = k0;
    while (j < n) {
      const std::int64_t slot = t / page_size, in_page = t - slot * page_size;
      const std::int64_t run = std::min(n - j, page_size - in_page);
      const std::int64_t page = cache_->page(b_, slot);
      const std::int64_t kb = page * cache_->k_page_stride + in_page * k_token_;
      const std::int64_t vb = page * cache_->v_page_stride + in_page * v_token_;
      if (j > 0 && (kb != k_off[j - 1] + k_token_ || vb != v_off[j - 1] + v_token_)) {
        runs.uniform = false;
        if (j % 16 != 0) runs.uniform16 = false;
      }
      for (std::int64_t r = 0; r < run; ++r) {
        k_off[j + r] = kb + r * k_token_;
        v_off[j + r] = vb + r * v_token_;
      }
      j += run;
      t += run;
    }
    return runs;
  }

 private:
  const DecodeKeys* cache_;
  std::int64_t b_;
  std::int64_t k_token_, v_token_;
  std::int64_t length_ = 0;
  bool paged_ = false;
  std::int64_t k_base_ = 0, v_base_ = 0;
};

// Sizes of one call's per-thread scratch, in floats, each region whole cache lines
// (decode_kernel.hpp carves it): rows per KV head (rounded up to 16 for the AMX form), KV heads
// per unit, keys per tile.
struct DecodeGeometry {
  static std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
  std::int64_t d, dp, rows, heads, bk;
  DecodeGeometry(std::int64_t head_dim, std::int64_t rows_, std::int64_t heads_, std::int64_t block_k)
      : d(head_dim), dp(round_up(head_dim, 32)), rows(rows_), heads(heads_), bk(block_k) {}
  std::int64_t state_rows() const { return rows * heads; }
  std::int64_t stat_floats() const { return round_up(state_rows(), 16); }
  std::size_t scratch_floats() const {
    return static_cast<std::size_t>(2 * state_rows() * dp + 2 * bk * dp + rows * bk + 3 * stat_floats());
  }
};

}  // namespace fastattn::cpu
