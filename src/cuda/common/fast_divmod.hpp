// fast_divmod.hpp — division of 32-bit values below 2^31 by a divisor fixed on the host before
// a launch: a multiply-high and a shift on the device, in place of the integer division's
// instruction sequence (a MUFU.RCP, conversions and fix-ups; for 64-bit operands a call into a
// slow path). Host and device (the CPU unit test runs the same arithmetic).
//
// The round-up method (Granlund and Montgomery, "Division by invariant integers using
// multiplication", 1994; CUTLASS's FastDivmod is the same idea): for a divisor d >= 2 with
// l = ceil(log2 d), the multiplier m = ceil(2^(31 + l) / d) fits 32 bits, and for every n < 2^31
//   floor(n / d) = floor(n * m / 2^(31 + l)) = umulhi(n, m) >> (l - 1),
// since n * (m * d - 2^(31 + l)) < 2^31 * d <= 2^(31 + l). d = 1 takes n itself (no multiplier
// fits). Our code.
#pragma once

#include <cstdint>

#include "common/mask.hpp"  // FASTATTN_HD

namespace fastattn::cuda {

struct FastDivmod {
  std::uint32_t divisor = 1;
  std::uint32_t multiplier = 0;  // 0: divisor 1
  std::uint32_t shift = 0;

  FastDivmod() = default;
  // d >= 1 (the callers pass counts of at least one; 0 is taken as 1).
  explicit FastDivmod(std::uint32_t d) : divisor(d > 0 ? d : 1) {
    if (divisor == 1) return;
    std::uint32_t l = 0;
    while ((std::uint64_t{1} << l) < divisor) ++l;  // ceil(log2 d), 1..32
    const std::uint64_t power = std::uint64_t{1} << (31 + l);
    multiplier = static_cast<std::uint32_t>((power + divisor - 1) / divisor);
    shift = l - 1;
  }

  // n < 2^31.
  FASTATTN_HD std::uint32_t div(std::uint32_t n) const {
    if (multiplier == 0) return n;
#if defined(__CUDA_ARCH__)
    return __umulhi(n, multiplier) >> shift;
#else
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * multiplier) >> 32) >> shift;
#endif
  }
  // quotient and remainder of n < 2^31.
  FASTATTN_HD void divmod(std::uint32_t n, std::uint32_t& quotient, std::uint32_t& remainder) const {
    quotient = div(n);
    remainder = n - quotient * divisor;
  }
};

}  // namespace fastattn::cuda
