// cuda_sm90_tile_numbering_test.cpp — the sm90 forward's tile numbers on the CPU (label `cpu`):
// FastDivmod (common/fast_divmod.hpp) against the division operator, and the 32-bit decode of
// tile_numbering.hpp against its 64-bit decode on random schedules (grid and persistent
// numbering, short last sections, alternating sections, GQA groups), including calls of close
// to 2^31 tiles. The device runs the same host+device arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "cuda/common/fast_divmod.hpp"
#include "cuda/flash_fwd_sm90/tile_numbering.hpp"

namespace fastattn::testing {
namespace {

using cuda::FastDivmod;
using cuda::Sm90TileCoords;
using cuda::Sm90TileSchedule;

constexpr std::uint32_t kMaxDividend = (std::uint32_t{1} << 31) - 1;

void expect_divides(std::uint32_t d, std::uint32_t n) {
  const FastDivmod f(d);
  std::uint32_t q = 0, r = 0;
  f.divmod(n, q, r);
  ASSERT_EQ(q, n / d) << "n " << n << " d " << d;
  ASSERT_EQ(r, n % d) << "n " << n << " d " << d;
}

TEST(CudaSm90TileNumbering, FastDivmodMatchesDivision) {
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int k = 12; k <= 31; ++k) {
    const std::uint32_t p = std::uint32_t{1} << k;
    for (std::uint32_t d : {p - 1, p, p + 1}) divisors.push_back(d);
  }
  divisors.push_back(kMaxDividend);
  std::mt19937 rng(20261207);
  std::uniform_int_distribution<std::uint32_t> any_divisor(1, kMaxDividend), any_dividend(0, kMaxDividend);
  for (int i = 0; i < 2000; ++i) divisors.push_back(any_divisor(rng));
  for (std::uint32_t d : divisors) {
    // Around the multiples of d (where a wrong quotient would show), the ends, random values.
    std::vector<std::uint32_t> dividends = {0, 1, kMaxDividend, kMaxDividend - 1};
    for (std::uint64_t q : {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{kMaxDividend} / d}) {
      const std::uint64_t m = q * d;
      for (std::int64_t delta = -1; delta <= 1; ++delta) {
        const std::int64_t n = static_cast<std::int64_t>(m) + delta;
        if (n >= 0 && n <= kMaxDividend) dividends.push_back(static_cast<std::uint32_t>(n));
      }
    }
    for (int i = 0; i < 64; ++i) dividends.push_back(any_dividend(rng));
    for (std::uint32_t n : dividends) expect_divides(d, n);
  }
  // Small divisors over a dense range.
  for (std::uint32_t d = 1; d <= 64; ++d)
    for (std::uint32_t n = 0; n < 70000; ++n) expect_divides(d, n);
}

Sm90TileSchedule make_schedule(int m_blocks, int heads, std::int64_t batch, std::int64_t section_hb, bool persistent,
                               bool alternate, int group_size) {
  Sm90TileSchedule s{};
  s.m_blocks = m_blocks;
  s.num_heads = heads;
  s.total_hb = static_cast<std::int64_t>(heads) * batch;
  s.num_tiles = s.total_hb * m_blocks;
  s.section_hb = persistent ? std::clamp<std::int64_t>(section_hb, 1, s.total_hb) : 1;
  s.persistent = persistent ? 1 : 0;
  s.alternate = persistent && alternate ? 1 : 0;
  s.group_size = group_size;
  cuda::sm90_prepare_tile_divisors(s);
  return s;
}

void expect_same_coords(const Sm90TileSchedule& s, std::int64_t tile) {
  Sm90TileSchedule wide = s;
  wide.decode32 = 0;
  const Sm90TileCoords a = cuda::sm90_tile_coords(s, tile), b = cuda::sm90_tile_coords(wide, tile),
                       c = cuda::sm90_tile_coords<true>(s, tile);
  ASSERT_EQ(std::make_tuple(a.m_block, a.head, a.batch, a.kv_head), std::make_tuple(b.m_block, b.head, b.batch, b.kv_head))
      << "tile " << tile << " of " << s.num_tiles << " (m_blocks " << s.m_blocks << ", heads " << s.num_heads
      << ", section_hb " << s.section_hb << ", persistent " << s.persistent << ", alternate " << s.alternate << ")";
  ASSERT_EQ(std::make_tuple(a.m_block, a.head, a.batch, a.kv_head), std::make_tuple(c.m_block, c.head, c.batch, c.kv_head));
}

TEST(CudaSm90TileNumbering, Decode32MatchesDecode64AndCoversEveryTile) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> m_blocks_of(1, 40), heads_of(1, 48), batch_of(1, 12), coin(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const int m_blocks = m_blocks_of(rng), heads = heads_of(rng), batch = batch_of(rng);
    std::vector<int> groups;
    for (int g = 1; g <= heads; ++g)
      if (heads % g == 0) groups.push_back(g);
    const int group = groups[std::uniform_int_distribution<std::size_t>(0, groups.size() - 1)(rng)];
    const std::int64_t total_hb = static_cast<std::int64_t>(heads) * batch;
    const std::int64_t section_hb = std::uniform_int_distribution<std::int64_t>(1, total_hb)(rng);
    const Sm90TileSchedule s = make_schedule(m_blocks, heads, batch, section_hb, coin(rng) == 1, coin(rng) == 1, group);
    ASSERT_EQ(s.decode32, 1);
    std::set<std::tuple<int, int, int>> seen;
    for (std::int64_t t = 0; t < s.num_tiles; ++t) {
      expect_same_coords(s, t);
      const Sm90TileCoords c = cuda::sm90_tile_coords(s, t);
      ASSERT_TRUE(c.m_block >= 0 && c.m_block < m_blocks && c.head >= 0 && c.head < heads && c.batch >= 0 &&
                  c.batch < batch && c.kv_head == c.head / group);
      seen.insert({c.m_block, c.head, c.batch});
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), s.num_tiles);  // a bijection
  }
}

TEST(CudaSm90TileNumbering, Decode32HoldsUpTo2To31Tiles) {
  std::mt19937 rng(11);
  // (m_blocks, heads, batch) with num_tiles at or just below 2^31 - 1, and one past it, which
  // keeps the 64-bit decode.
  const std::vector<std::tuple<int, int, std::int64_t>> shapes = {
      {1, 1, kMaxDividend}, {7, 3, kMaxDividend / 21}, {1024, 64, 32767}, {32768, 1, 65535}, {3, 1, 715827882}};
  for (const auto& [m_blocks, heads, batch] : shapes) {
    for (bool persistent : {false, true}) {
      for (std::int64_t section_hb : {std::int64_t{1}, std::int64_t{5}, std::int64_t{132}, std::int64_t{1} << 20}) {
        const Sm90TileSchedule s = make_schedule(m_blocks, heads, batch, section_hb, persistent, section_hb == 5, 1);
        ASSERT_LE(s.num_tiles, kMaxDividend);
        ASSERT_EQ(s.decode32, 1);
        std::uniform_int_distribution<std::int64_t> any_tile(0, s.num_tiles - 1);
        for (std::int64_t t : {std::int64_t{0}, s.num_tiles - 1, s.num_tiles / 2}) expect_same_coords(s, t);
        for (int i = 0; i < 20000; ++i) expect_same_coords(s, any_tile(rng));
      }
    }
  }
  const Sm90TileSchedule past = make_schedule(2, 1, std::int64_t{1} << 30, 132, true, false, 1);
  EXPECT_EQ(past.num_tiles, std::int64_t{1} << 31);
  EXPECT_EQ(past.decode32, 0);
}

}  // namespace
}  // namespace fastattn::testing
