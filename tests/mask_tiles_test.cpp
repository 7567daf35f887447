// mask_tiles_test.cpp — SequenceMask's tile classification (src/common/mask.hpp), on the CPU
// (label `cpu`): full_key_tiles and full_query_tiles, the ranges a key loop (forward) or a query
// loop (backward) tests instead of calling classify per tile, are exactly the tiles classify
// calls full, and classify agrees with visible() pair by pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>

#include "common/mask.hpp"

namespace fastattn::testing {
namespace {

SequenceMask random_mask(std::mt19937& rng, std::int64_t len_q, std::int64_t len_k) {
  SequenceMask mask;
  const int kind = static_cast<int>(rng() % 5);  // none, causal, left window, both sides, right only
  mask.left = kind == 2 || kind == 3 ? static_cast<std::int64_t>(rng() % 300) : -1;
  mask.right = kind == 1 ? 0 : kind == 3 || kind == 4 ? static_cast<std::int64_t>(rng() % 90) : -1;
  mask.offset = rng() % 2 == 0 ? len_k - len_q : 0;  // bottom-right or top-left
  mask.seqlen_k = len_k;
  return mask;
}

TEST(MaskTiles, FullKeyTilesAreTheTilesClassifyCallsFull) {
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 20000; ++trial) {
    const std::int64_t len_q = 1 + rng() % 900, len_k = rng() % 900;
    const SequenceMask mask = random_mask(rng, len_q, len_k);
    const std::int64_t block_m = std::int64_t{64} << (rng() % 3);  // 64, 128, 256
    const std::int64_t block_n = (rng() % 2 == 0) ? 80 + 16 * static_cast<std::int64_t>(rng() % 7) : 128;
    for (std::int64_t q0 = 0; q0 < len_q; q0 += block_m) {
      // The last query tile's end padded (the backward's classify calls) and clamped to len_q
      // (the sm90 forward's Sm90TileWork::q1).
      for (const std::int64_t q1 : {q0 + block_m, std::min(q0 + block_m, len_q)}) {
        const SequenceMask::KeyTileRange full = mask.full_key_tiles(q0, q1, block_n);
        for (std::int64_t n = 0; n * block_n < len_k + 2 * block_n; ++n) {
          const bool is_full = mask.classify(q0, q1, n * block_n, (n + 1) * block_n) == TileClass::full;
          ASSERT_EQ(n >= full.lo && n < full.hi, is_full)
              << "trial " << trial << " q " << q0 << ".." << q1 << " tile " << n << " block_n " << block_n
              << " len " << len_q << "x" << len_k << " left " << mask.left << " right " << mask.right
              << " offset " << mask.offset;
        }
      }
    }
  }
}

// full_query_tiles, the backward's range over the query tiles of one key tile, is exactly the
// tiles classify calls full (query tile ends padded, as the sm90 backward passes them; key
// tiles past seqlen_k included, which are never full).
TEST(MaskTiles, FullQueryTilesAreTheTilesClassifyCallsFull) {
  std::mt19937 rng(20261206);
  for (int trial = 0; trial < 20000; ++trial) {
    const std::int64_t len_q = 1 + rng() % 900, len_k = 1 + rng() % 900;
    const SequenceMask mask = random_mask(rng, len_q, len_k);
    const std::int64_t block_m = (rng() % 2 == 0) ? 64 : 48 + 16 * static_cast<std::int64_t>(rng() % 6);
    const std::int64_t block_n = std::int64_t{64} << (rng() % 2);  // 64, 128
    for (std::int64_t k0 = 0; k0 < len_k + block_n; k0 += block_n) {
      const SequenceMask::QueryTileRange full = mask.full_query_tiles(k0, k0 + block_n, block_m);
      for (std::int64_t m = 0; m * block_m < len_q; ++m) {
        const bool is_full = mask.classify(m * block_m, (m + 1) * block_m, k0, k0 + block_n) == TileClass::full;
        ASSERT_EQ(m >= full.lo && m < full.hi, is_full)
            << "trial " << trial << " keys " << k0 << " tile " << m << " block_m " << block_m << " len " << len_q
            << "x" << len_k << " left " << mask.left << " right " << mask.right << " offset " << mask.offset;
      }
    }
  }
}

// classify's answer against visible() on every pair of small tiles.
TEST(MaskTiles, ClassifyMatchesVisiblePairs) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const std::int64_t len_q = 1 + rng() % 200, len_k = 1 + rng() % 200;
    const SequenceMask mask = random_mask(rng, len_q, len_k);
    constexpr std::int64_t kBm = 16, kBn = 24;
    for (std::int64_t q0 = 0; q0 < len_q; q0 += kBm) {
      for (std::int64_t k0 = 0; k0 < len_k; k0 += kBn) {
        std::int64_t seen = 0, pairs = 0;
        for (std::int64_t i = q0; i < q0 + kBm; ++i) {
          for (std::int64_t j = k0; j < k0 + kBn; ++j) {
            ++pairs;
            seen += mask.visible(i, j) ? 1 : 0;
          }
        }
        const TileClass c = mask.classify(q0, q0 + kBm, k0, k0 + kBn);
        EXPECT_EQ(c == TileClass::full, seen == pairs) << "trial " << trial;
        if (c == TileClass::empty) {
          EXPECT_EQ(seen, 0) << "trial " << trial;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fastattn::testing
