// tile_scheduler.cuh — which (query block, head, batch) a CTA of the sm90 forward owns, and the
// key tiles it visits. Both roles (producer and consumers) derive the same TileWork.
//
// Now: one CTA per tile, grid (query blocks, heads, batch), the last query blocks first (under a
// causal mask they see the most keys, so the heaviest CTAs start in the first wave). A
// persistent scheduler (longest-first over an atomic counter, FA3 tile_scheduler.hpp) is the
// next step; it changes only this file and the launcher's grid.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/mask.hpp"
#include "cuda/flash_fwd/params.hpp"

namespace fastattn::cuda {

struct Sm90TileWork {
  int m_block, head, batch, kv_head;
  int q0, q1;        // query rows [q0, q1) of the sequence
  int len_q, len_k;
  int n_begin, n_end;  // key tiles [n_begin, n_end), visited from n_end - 1 down
  SequenceMask mask;
};

template <class T>
struct Sm90TileScheduler {
  static dim3 grid(const ForwardParams& p) {
    const int m_blocks = (p.seqlen_q + T::kBlockM - 1) / T::kBlockM;
    return dim3(static_cast<unsigned>(m_blocks), static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.batch));
  }

  // Padded batches only (varlen runs on the sm80 kernels: flash_fwd_sm90/plan.hpp).
  __device__ __forceinline__ static Sm90TileWork work(const ForwardParams& p) {
    Sm90TileWork w;
    w.m_block = static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x);
    w.head = static_cast<int>(blockIdx.y);
    w.batch = static_cast<int>(blockIdx.z);
    w.kv_head = w.head / p.group_size;
    w.len_q = p.seqlen_q;
    w.len_k = p.seqlen_k;
    w.q0 = w.m_block * T::kBlockM;
    w.q1 = min(w.q0 + T::kBlockM, w.len_q);
    w.mask.left = p.window_left;
    w.mask.right = p.window_right;
    w.mask.offset = p.bottom_right ? w.len_k - w.len_q : 0;
    w.mask.seqlen_k = w.len_k;
    // Key tiles covering [key_begin, key_end): none when the window misses every key.
    const int64_t key_begin = w.mask.key_begin(w.q0), key_end = w.mask.key_end(w.q1);
    w.n_begin = static_cast<int>(key_begin / T::kBlockN);
    w.n_end = key_begin < key_end ? static_cast<int>((key_end + T::kBlockN - 1) / T::kBlockN) : w.n_begin;
    return w;
  }
};

}  // namespace fastattn::cuda
