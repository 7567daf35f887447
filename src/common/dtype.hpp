// dtype.hpp — scalar conversions between f16 / bf16 storage and float, and element access by
// DType (the float64 reference and the test harness read and write tensors through these).
#pragma once

#include <cstdint>
#include <cstring>

#include "fastattn/tensor.hpp"

namespace fastattn {

inline float bf16_to_float(std::uint16_t h) {
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

// IEEE binary16, round to nearest even, with subnormals, infinities and NaN.
inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline std::uint16_t float_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal or zero in f16
    if (absx < 0x33000000u) return static_cast<std::uint16_t>(sign);  // rounds to zero
    const std::uint32_t e = absx >> 23;
    const std::uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e - 150) and the f16 subnormal unit is 2^-24: drop (126 - e) bits of m.
    const std::uint32_t drop = 126 - e;
    std::uint32_t r = m >> drop;
    const std::uint32_t rem = m & ((1u << drop) - 1u);
    const std::uint32_t half = 1u << (drop - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = absx - 0x38000000u;  // rebias exponent 127 -> 15
  const std::uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

// Element `index` of a buffer of `dtype`, widened to double.
inline double load_element(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[index]);
    case DType::i32: return static_cast<const std::int32_t*>(base)[index];
  }
  return 0.0;
}

// Rounds a double to the storage dtype (via float, round-to-nearest-even both ways; the double
// rounding f64 -> f32 -> f16 differs from direct rounding only on exact f32 ties, far below
// every tolerance built on it) and stores it.
inline void store_element(void* base, DType dtype, std::int64_t index, double value) {
  const float f = static_cast<float>(value);
  switch (dtype) {
    case DType::f32: static_cast<float*>(base)[index] = f; break;
    case DType::f16: static_cast<std::uint16_t*>(base)[index] = float_to_f16(f); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[index] = float_to_bf16(f); break;
    case DType::i32: static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(value); break;
  }
}

}  // namespace fastattn
