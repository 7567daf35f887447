// perf_cache_size_test.cpp — the sysfs cache sizes `fastattn bench` and `info` read
// (tools/cli/perf/cpu_features.hpp: parse_cache_size), so that a row whose K+V fit the
// last-level cache is marked as such.
#include <gtest/gtest.h>

#include "cpu_features.hpp"

namespace fastattn::perf {
namespace {

TEST(PerfCacheSize, ParsesSysfsSizes) {
  EXPECT_EQ(parse_cache_size("48K"), 48 * 1024);
  EXPECT_EQ(parse_cache_size("307200K"), std::int64_t{300} << 20);
  EXPECT_EQ(parse_cache_size("2M"), std::int64_t{2} << 20);
  EXPECT_EQ(parse_cache_size("1G"), std::int64_t{1} << 30);
  EXPECT_EQ(parse_cache_size("4096"), 4096);
  for (const char* bad : {"", "K", "12Q", "12KB", "-4K", " 4K", "99999999999999999999K", "9000000000G", "9000000000000M"})
    EXPECT_EQ(parse_cache_size(bad), 0) << "'" << bad << "'";
}

TEST(PerfCacheSize, LastLevelCacheIsUnknownOrPlausible) {
  const CpuFeatures cpu = detect_cpu_features();
  EXPECT_TRUE(cpu.last_level_cache_bytes == 0 ||
              (cpu.last_level_cache_bytes >= (std::int64_t{64} << 10) &&
               cpu.last_level_cache_bytes <= (std::int64_t{64} << 30)))
      << cpu.last_level_cache_bytes;
}

}  // namespace
}  // namespace fastattn::perf
