// tile_numbering.hpp — what a tile number of the sm90 forward means: (query block, head, batch),
// in the numbering of the call's schedule (tile_scheduler.cuh says which numbers a CTA takes).
// Host and device: the CPU unit test (cuda_sm90_tile_numbering_test.cpp) checks the 32-bit
// decode against the 64-bit one.
//
//   grid        tile = (batch * heads + head) * m_blocks + m_rank
//   persistent  tile = section * section_tiles + m_rank * width + (head, batch pair in the
//   (dynamic)   section), section_tiles = section_hb * m_blocks, width = section_hb (the last
//               section: the pairs left); `alternate` reverses m_rank in odd sections
// m_rank 0 is the last query block (longest first under a causal mask).
//
// Every tile visit decodes its number, in the producer thread and in every consumer thread,
// before the tile's first load or GEMM: on short rows that is a part of the tile's serial time.
// Decoded with 64-bit divisions (and the 32-bit division of the head by the group size) it held
// about 6% of the warp samples of the d = 64 narrow tile's kernel at b32 h32 s512 causal (ncu
// source counters, H100, eighteenth session: four MUFU.RCP sequences in front of the Q wait).
// So calls of fewer than 2^31 tiles decode in 32 bits with divisors prepared at launch
// (common/fast_divmod.hpp); the others keep the 64-bit divisions. (A tile writes at least one
// output row of 64 or more 16-bit values, so 2^31 tiles write 256 GiB or more.)
#pragma once

#include <cstdint>
#include <limits>

#include "common/mask.hpp"  // FASTATTN_HD
#include "cuda/common/fast_divmod.hpp"

namespace fastattn::cuda {

// The host-filled schedule, a kernel argument (Sm90TileScheduler::schedule fills it).
struct Sm90TileSchedule {
  std::int64_t num_tiles;
  int m_blocks;          // query blocks per (head, batch)
  int num_heads;
  std::int64_t total_hb;  // heads * batch
  std::int64_t section_hb;  // persistent: (head, batch) pairs per section (plan.hpp: Sm90Sections)
  int alternate;       // persistent (not dynamic), Sm90Sections::wave: odd sections take the ranks in reverse
  int persistent;    // 1: persistent numbering and grid (persistent: the CTA loops with stride
                     // gridDim.x; dynamic: it takes tiles from the counter)
  int group_size;    // query heads per KV head
  // 32-bit decode (num_tiles < 2^31; sm90_prepare_tile_divisors): the divisors of the numbering.
  int decode32;
  FastDivmod by_m_blocks, by_section_tiles, by_section_hb, by_last_width, by_heads, by_group;
};

// Fills the 32-bit decode's divisors once the other fields are set (host).
inline void sm90_prepare_tile_divisors(Sm90TileSchedule& s) {
  // Tile numbers below num_tiles <= 2^31 - 1, so below 2^31, as FastDivmod needs.
  s.decode32 = s.num_tiles <= std::numeric_limits<std::int32_t>::max() ? 1 : 0;
  if (!s.decode32) return;
  // section_hb is in [1, total_hb] (schedule()), so section_tiles <= num_tiles.
  const std::int64_t sections = (s.total_hb + s.section_hb - 1) / s.section_hb;
  s.by_m_blocks = FastDivmod(static_cast<std::uint32_t>(s.m_blocks));
  s.by_section_tiles = FastDivmod(static_cast<std::uint32_t>(s.section_hb * s.m_blocks));
  s.by_section_hb = FastDivmod(static_cast<std::uint32_t>(s.section_hb));
  s.by_last_width = FastDivmod(static_cast<std::uint32_t>(s.total_hb - (sections - 1) * s.section_hb));
  s.by_heads = FastDivmod(static_cast<std::uint32_t>(s.num_heads));
  s.by_group = FastDivmod(static_cast<std::uint32_t>(s.group_size > 0 ? s.group_size : 1));
}

struct Sm90TileCoords {
  int m_block, head, batch, kv_head;
};

// Tile number -> coordinates. kDecode32Only: the 32-bit decode alone (the dynamic kernel, whose
// launcher refuses 2^31 tiles or more: the 64-bit divisions' slow-path calls made ptxas spill in
// its load thread); otherwise s.decode32 picks, uniformly over the grid.
template <bool kDecode32Only = false>
FASTATTN_HD Sm90TileCoords sm90_tile_coords(const Sm90TileSchedule& s, std::int64_t tile) {
  Sm90TileCoords c;
  if (kDecode32Only || s.decode32) {
    const auto t = static_cast<std::uint32_t>(tile);
    std::uint32_t hb, m_rank;
    if (!s.persistent) {
      s.by_m_blocks.divmod(t, hb, m_rank);
    } else {
      std::uint32_t section, local;
      s.by_section_tiles.divmod(t, section, local);
      const std::uint32_t hb0 = section * s.by_section_hb.divisor;
      // The last section may be short.
      const FastDivmod& width = hb0 + s.by_section_hb.divisor > static_cast<std::uint64_t>(s.total_hb)
                                    ? s.by_last_width
                                    : s.by_section_hb;
      std::uint32_t pair;
      width.divmod(local, m_rank, pair);
      hb = hb0 + pair;
      if (s.alternate && (section & 1u)) m_rank = static_cast<std::uint32_t>(s.m_blocks) - 1u - m_rank;
    }
    std::uint32_t batch, head;
    s.by_heads.divmod(hb, batch, head);
    c.m_block = s.m_blocks - 1 - static_cast<int>(m_rank);
    c.head = static_cast<int>(head);
    c.batch = static_cast<int>(batch);
    c.kv_head = static_cast<int>(s.by_group.div(head));
    return c;
  }
  std::int64_t hb;
  int m_rank;
  if (!s.persistent) {
    hb = tile / s.m_blocks;
    m_rank = static_cast<int>(tile - hb * s.m_blocks);
  } else {
    const std::int64_t section_tiles = s.section_hb * s.m_blocks;
    const std::int64_t section = tile / section_tiles;
    const std::int64_t local = tile - section * section_tiles;
    const std::int64_t hb0 = section * s.section_hb;
    const std::int64_t rest = s.total_hb - hb0;
    const std::int64_t width = s.section_hb < rest ? s.section_hb : rest;  // the last section may be short
    m_rank = static_cast<int>(local / width);
    hb = hb0 + (local - m_rank * width);
    if (s.alternate && (section & 1)) m_rank = s.m_blocks - 1 - m_rank;
  }
  c.m_block = s.m_blocks - 1 - m_rank;
  c.head = static_cast<int>(hb % s.num_heads);
  c.batch = static_cast<int>(hb / s.num_heads);
  c.kv_head = c.head / (s.group_size > 0 ? s.group_size : 1);
  return c;
}

}  // namespace fastattn::cuda
