// isa.cpp — which CPU instruction sets this binary has kernels for, and which one runs.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

#ifndef FASTATTN_HAVE_AVX512
#define FASTATTN_HAVE_AVX512 0
#endif

namespace fastattn::cpu {
namespace {

// What the CPU (and the OS, which must save the wider registers) supports. GCC's and Clang's
// __builtin_cpu_supports read cpuid and check XCR0 for the AVX / AVX-512 register state.
Isa detect_uncached() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))) {
    return Isa::none;
  }
  Isa best = Isa::avx2;
#if FASTATTN_HAVE_AVX512
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    best = Isa::avx512;
    if (__builtin_cpu_supports("avx512bf16")) best = Isa::avx512bf16;
  }
#endif
  return best;
#else
  return Isa::none;
#endif
}

}  // namespace

const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::none: return "none";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512bf16: return "avx512bf16";
  }
  return "unknown";
}

Isa isa_from_string(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (Isa isa : {Isa::none, Isa::avx2, Isa::avx512, Isa::avx512bf16}) {
    if (lower == to_string(isa)) return isa;
  }
  throw Error(ErrorCode::invalid_argument,
              "cpu isa: expected one of none, avx2, avx512, avx512bf16, got '" + name + "'");
}

Isa detect_isa() {
  static const Isa detected = detect_uncached();
  return detected;
}

std::vector<Isa> compiled_isas() {
  std::vector<Isa> isas{Isa::avx2};
#if FASTATTN_HAVE_AVX512
  isas.push_back(Isa::avx512);
  isas.push_back(Isa::avx512bf16);
#endif
  return isas;
}

Isa selected_isa() {
  const Isa detected = detect_isa();
  const char* cap = env_value(EnvVar::cpu_isa);
  if (cap == nullptr || *cap == '\0') return detected;
  Isa limit;
  try {
    limit = isa_from_string(cap);
  } catch (const Error&) {
    throw Error(ErrorCode::invalid_argument,
                std::string("FASTATTN_CPU_ISA: expected one of none, avx2, avx512, ") +
                    "avx512bf16, got '" + cap + "'");
  }
  return static_cast<int>(limit) < static_cast<int>(detected) ? limit : detected;
}

const char* to_string(Bf16Dot dot) noexcept {
  switch (dot) {
    case Bf16Dot::off: return "off";
    case Bf16Dot::native: return "bf16dot";
    case Bf16Dot::emulated: return "bf16dot-emulated";
  }
  return "unknown";
}

Bf16Dot forward_bf16_dot(Isa isa, DType dtype) {
  const char* env = env_value(EnvVar::cpu_bf16_dot);
  const std::string mode = env ? env : "";
  if (!mode.empty() && mode != "native" && mode != "emulated" && mode != "off") {
    throw Error(ErrorCode::invalid_argument,
                "FASTATTN_CPU_BF16_DOT: expected native, emulated or off, got '" + mode + "'");
  }
  if (dtype != DType::bf16 || isa == Isa::none || mode == "off") return Bf16Dot::off;
  if (mode == "emulated") return Bf16Dot::emulated;
  if (mode == "native") {
    if (isa != Isa::avx512bf16) {
      throw Error(ErrorCode::unsupported,
                  std::string("FASTATTN_CPU_BF16_DOT=native: expected a CPU with AVX-512 BF16 (ISA avx512bf16), got ") +
                      to_string(isa));
    }
    return Bf16Dot::native;
  }
  return isa == Isa::avx512bf16 && bf16_dot_speed_ratio() >= kBf16DotMinRatio ? Bf16Dot::native : Bf16Dot::off;
}

double bf16_dot_speed_ratio() {
#if FASTATTN_HAVE_AVX512
  static const double ratio = detect_isa() == Isa::avx512bf16 ? bf16_dot_speed_ratio_avx512() : 0.0;
  return ratio;
#else
  return 0.0;
#endif
}

Bf16Dot bf16_dot_of(const KernelChoice& choice) {
  if (choice.kernel.find(".bf16dot-emulated.") != std::string::npos) return Bf16Dot::emulated;
  if (choice.kernel.find(".bf16dot.") != std::string::npos) return Bf16Dot::native;
  return Bf16Dot::off;
}

}  // namespace fastattn::cpu
