// cuda_sm90_positions_test.cpp — the sm90 forward's position arithmetic in 32 bits, on the CPU
// (label `cpu`): a tile's key range and full key tiles as Sm90TileScheduler::work and the
// consumer work them out (SequenceMask32, windows clamped by sm90_clamped_window) against the
// 64-bit mask with the call's windows, on random calls up to the limit kSm90MaxPositions
// (plan.hpp), windows up to 2^31 - 1 (what the CUDA path passes) and varlen sequences shorter
// than the longest; and every intermediate sum of that arithmetic below 2^31 in magnitude.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "common/mask.hpp"
#include "cuda/flash_fwd_sm90/plan.hpp"

namespace fastattn::testing {
namespace {

using cuda::kSm90MaxPositions;

// The tile's key tiles [n_begin, n_end) and its full ones, clamped to them (tile_scheduler.cuh,
// consumer.cuh).
struct TileKeys {
  std::int64_t n_begin, n_end, full_lo, full_hi;
  bool operator==(const TileKeys& o) const {
    return n_begin == o.n_begin && n_end == o.n_end && full_lo == o.full_lo && full_hi == o.full_hi;
  }
};

template <class Index>
TileKeys tile_keys(const BasicSequenceMask<Index>& mask, Index q0, Index q1, Index block_n) {
  const Index key_begin = mask.key_begin(q0), key_end = mask.key_end(q1);
  TileKeys t{};
  t.n_begin = key_begin / block_n;
  t.n_end = key_begin < key_end ? (key_end + block_n - 1) / block_n : t.n_begin;
  const auto full = mask.full_key_tiles(q0, q1, block_n);
  t.full_lo = std::min<std::int64_t>(std::max<std::int64_t>(full.lo, t.n_begin), t.n_end);
  t.full_hi = std::min<std::int64_t>(std::max<std::int64_t>(full.hi, t.n_begin), t.n_end);
  return t;
}

// The largest magnitude among the sums SequenceMask32 forms for this tile (key_begin, key_end,
// full_key_tiles with floor_div's a - b + 1), worked out in 64 bits.
std::int64_t largest_sum(const SequenceMask& m, std::int64_t q0, std::int64_t q1, std::int64_t block_n) {
  const std::int64_t d_first = q0 + m.offset, d_last = (q1 - 1) + m.offset;
  std::int64_t largest = std::max({std::abs(d_first), std::abs(d_last), std::abs(q1 - 1)});
  auto see = [&](std::int64_t x) { largest = std::max(largest, std::abs(x)); };
  if (m.left >= 0) {
    see(d_first - m.left);
    see(d_last - m.left);
    see(-(d_last - m.left) - block_n + 1);
  }
  if (m.right >= 0) {
    see(d_last + m.right + 1);
    see(d_first + m.right + 1);
    see(d_first + m.right + 1 - block_n + 1);
  }
  see(m.seqlen_k + block_n - 1);
  return largest;
}

std::int64_t random_window(std::mt19937_64& rng, std::int64_t span) {
  switch (rng() % 6) {
    case 0: return -1;
    case 1: return 0;
    case 2: return static_cast<std::int64_t>(rng() % 300);
    case 3: return static_cast<std::int64_t>(rng() % (span + 2));          // about the call's size
    case 4: return span + static_cast<std::int64_t>(rng() % 1000);         // just past it
    default: return (std::int64_t{1} << 31) - 1 - static_cast<std::int64_t>(rng() % 1000);  // the CUDA path's clamp
  }
}

void check_calls(std::uint64_t seed, std::int64_t max_len, int trials) {
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < trials; ++trial) {
    // The call's longest sequences (seqlen_q + seqlen_k < kSm90MaxPositions) and this tile's
    // sequence (varlen: no longer).
    const std::int64_t seqlen_q = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_len));
    const std::int64_t seqlen_k =
        1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(std::min(max_len, kSm90MaxPositions - 1 - seqlen_q)));
    ASSERT_TRUE(cuda::sm90_positions_fit(seqlen_q, seqlen_k));
    const bool varlen = rng() % 2 == 0;
    const std::int64_t len_q = varlen ? 1 + static_cast<std::int64_t>(rng() % seqlen_q) : seqlen_q;
    const std::int64_t len_k = varlen ? static_cast<std::int64_t>(rng() % (seqlen_k + 1)) : seqlen_k;
    SequenceMask wide;
    wide.left = random_window(rng, seqlen_q + seqlen_k);
    wide.right = rng() % 3 == 0 ? 0 : random_window(rng, seqlen_q + seqlen_k);
    wide.offset = rng() % 2 == 0 ? len_k - len_q : 0;  // bottom-right or top-left
    wide.seqlen_k = len_k;
    SequenceMask32 narrow;
    narrow.left = static_cast<std::int32_t>(cuda::sm90_clamped_window(wide.left, seqlen_q, seqlen_k));
    narrow.right = static_cast<std::int32_t>(cuda::sm90_clamped_window(wide.right, seqlen_q, seqlen_k));
    narrow.offset = static_cast<std::int32_t>(wide.offset);
    narrow.seqlen_k = static_cast<std::int32_t>(len_k);
    const std::int64_t block_m = rng() % 2 == 0 ? 128 : 192;
    const std::int64_t block_n = rng() % 3 == 0 ? 176 : (rng() % 2 == 0 ? 80 : 128);
    const std::int64_t m_blocks = (len_q + block_m - 1) / block_m;
    // The first, last and a random query block.
    for (const std::int64_t m : {std::int64_t{0}, m_blocks - 1, static_cast<std::int64_t>(rng() % m_blocks)}) {
      const std::int64_t q0 = m * block_m, q1 = std::min(q0 + block_m, len_q);
      SequenceMask clamped = wide;  // the 64-bit mask with the clamped windows
      clamped.left = narrow.left;
      clamped.right = narrow.right;
      ASSERT_LT(largest_sum(clamped, q0, q1, block_n), std::int64_t{1} << 31)
          << "trial " << trial << " seqlen " << seqlen_q << "x" << seqlen_k;
      const TileKeys expected = tile_keys<std::int64_t>(wide, q0, q1, block_n);
      const TileKeys got = tile_keys<std::int32_t>(narrow, static_cast<std::int32_t>(q0), static_cast<std::int32_t>(q1),
                                                   static_cast<std::int32_t>(block_n));
      ASSERT_TRUE(got == expected) << "trial " << trial << " len " << len_q << "x" << len_k << " q " << q0 << ".."
                                   << q1 << " left " << wide.left << " right " << wide.right << " offset "
                                   << wide.offset << ": tiles " << got.n_begin << ".." << got.n_end << " full "
                                   << got.full_lo << ".." << got.full_hi << ", expected " << expected.n_begin << ".."
                                   << expected.n_end << " full " << expected.full_lo << ".." << expected.full_hi;
      // The keys at the windows' edges, seen alike by both masks.
      for (const std::int64_t i : {q0, q1 - 1}) {
        const std::int64_t d = i + wide.offset;
        for (const std::int64_t j0 : {d - wide.left, d + wide.right, std::int64_t{0}, len_k - 1}) {
          for (std::int64_t j = j0 - 1; j <= j0 + 1; ++j) {
            if (j < 0 || j >= len_k) continue;
            ASSERT_EQ(narrow.visible(static_cast<std::int32_t>(i), static_cast<std::int32_t>(j)), wide.visible(i, j))
                << "trial " << trial << " i " << i << " j " << j;
          }
        }
      }
    }
  }
}

TEST(CudaSm90Positions, ShortCallsMatchThe64BitMask) { check_calls(20261207, 900, 40000); }

TEST(CudaSm90Positions, CallsUpToTheLimitMatchThe64BitMask) {
  check_calls(7, kSm90MaxPositions - 2, 40000);
}

TEST(CudaSm90Positions, TheLimitAndTheClamp) {
  EXPECT_TRUE(cuda::sm90_positions_fit(kSm90MaxPositions - 2, 1));
  EXPECT_FALSE(cuda::sm90_positions_fit(kSm90MaxPositions - 1, 1));
  EXPECT_EQ(cuda::sm90_clamped_window(-1, 100, 200), -1);
  EXPECT_EQ(cuda::sm90_clamped_window(300, 100, 200), 300);
  EXPECT_EQ(cuda::sm90_clamped_window(301, 100, 200), 300);
  EXPECT_EQ(cuda::sm90_clamped_window((std::int64_t{1} << 31) - 1, 100, 200), 300);
}

}  // namespace
}  // namespace fastattn::testing
