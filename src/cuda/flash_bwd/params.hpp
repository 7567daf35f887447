// params.hpp — what the backward kernels read: plain values built on the host from an
// AttentionProblem (cuda_backend.cu). 64-bit strides and offsets throughout.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fastattn::cuda {

struct BackwardParams {
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* dout;
  const float* lse;  // [batch, heads, seqlen_q] by the strides below (varlen: global tokens)
  void* dq;
  void* dk;
  void* dv;

  // Element strides; in varlen mode batch strides are unused (cu_seqlens give token offsets).
  int64_t q_batch_stride, q_token_stride, q_head_stride;
  int64_t k_batch_stride, k_token_stride, k_head_stride;
  int64_t v_batch_stride, v_token_stride, v_head_stride;
  int64_t o_batch_stride, o_token_stride, o_head_stride;
  int64_t do_batch_stride, do_token_stride, do_head_stride;
  int64_t dq_batch_stride, dq_token_stride, dq_head_stride;
  int64_t dk_batch_stride, dk_token_stride, dk_head_stride;
  int64_t dv_batch_stride, dv_token_stride, dv_head_stride;
  int64_t lse_batch_stride, lse_head_stride, lse_token_stride;

  const int32_t* cu_seqlens_q;  // device pointers, or null for padded batches
  const int32_t* cu_seqlens_k;

  int batch;
  int num_heads;
  int num_kv_heads;
  int group_size;  // query heads per KV head
  int seqlen_q;    // padded: the length; varlen: the longest
  int seqlen_k;
  int64_t total_q;  // query rows of the scratch buffers: batch * seqlen_q, or total tokens

  float scale;       // softmax scale: dQ and dK are scale * (dS K) and scale * (dS^T Q)
  float scale_log2;  // scale * log2(e); with softcap: log2(e)
  float softcap;     // 0: off
  float softcap_pre_scale;  // scale / softcap
  int64_t window_left;
  int64_t window_right;
  bool bottom_right;

  // Scratch (fp32): D = rowsum(dO * O) as [heads][total_q], and dQ partial sums as
  // [num_splits][total_q][heads][head_dim].
  float* d_sum;
  float* dq_accum;
  // With tile_grid (below): a 1-D grid of main_tiles whole tiles, then tail_tiles x tail_pieces
  // pieces (the tail split, plan.hpp: choose_tail_split; tail_tiles = 0: none).
  int64_t main_tiles;
  int64_t tail_tiles;
  int tail_pieces;
  int grid_n_blocks;        // key blocks per (batch, KV head)
  float* dkv_accum;         // [tail_tiles][2 (dK, dV)][block_n][head_dim] fp32 partial sums
  unsigned* tail_counters;  // [tail_tiles]: pieces of the tile done
  size_t zero_bytes;        // scratch zeroed before the main kernel, from dq_accum on
  int num_splits;      // deterministic: key-block splits, each with its own dQ buffer; else 1
  bool small_blocks;   // the small-shared-memory tiles (plan.hpp: backward_blocks_small)
  bool deterministic;  // true: plain read-add-write into this split's dQ buffer; false: atomics
  bool tile_grid;      // the unmasked kernel on a 1-D grid of tiles (plan.hpp: plan_tile_grid)
  // The sm90 backward (flash_bwd_sm90/): its CTA order (Sm90TileOrder), dQ reduction
  // (Sm90DqReduction: 0 atomic, 1 bulk reduce-add, 2 atomic_tiles) and, in deterministic mode, one semaphore per (batch, head, query block)
  // in scratch zeroed with dq_accum.
  int sm90_tile_order;
  int sm90_dq;
  int* dq_semaphores;
  // Key rows: batch * seqlen_k, or total tokens (the sm90 backward's varlen tensor maps). Last,
  // so the kernels that do not read it keep their parameter offsets.
  int64_t total_k;
  // The sm90 backward's longest-first orders in groups of this many (batch, KV head) pairs
  // (tile_scheduler.hpp: sm90_backward_tile; 0: one group of every pair). Last, as total_k.
  int sm90_tile_group;
};

}  // namespace fastattn::cuda
