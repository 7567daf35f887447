// isa.cpp — which CPU instruction sets this binary has kernels for, and which one runs.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

#ifndef FASTATTN_HAVE_AVX512
#define FASTATTN_HAVE_AVX512 0
#endif
#ifndef FASTATTN_HAVE_AMX
#define FASTATTN_HAVE_AMX 0
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
#if FASTATTN_HAVE_AMX
  if (best == Isa::avx512bf16 && amx::amx_available()) best = Isa::amx;
#endif
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
    case Isa::amx: return "amx";
  }
  return "unknown";
}

Isa isa_from_string(const std::string& name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (Isa isa : {Isa::none, Isa::avx2, Isa::avx512, Isa::avx512bf16, Isa::amx}) {
    if (lower == to_string(isa)) return isa;
  }
  throw Error(ErrorCode::invalid_argument,
              "cpu isa: expected one of none, avx2, avx512, avx512bf16, amx, got '" + name + "'");
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
#if FASTATTN_HAVE_AMX
  isas.push_back(Isa::amx);
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
                    "avx512bf16, amx, got '" + cap + "'");
  }
  return static_cast<int>(limit) < static_cast<int>(detected) ? limit : detected;
}

const char* to_string(DecodeForm form) noexcept {
  switch (form) {
    case DecodeForm::f32_tiles: return "f32_tiles";
    case DecodeForm::bf16_widened: return "bf16_widened";
    case DecodeForm::bf16_dot: return "bf16_dot";
    case DecodeForm::bf16_pairs: return "bf16_pairs";
    case DecodeForm::amx: return "amx";
  }
  return "unknown";
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
    if (isa != Isa::avx512bf16 && isa != Isa::amx) {
      throw Error(ErrorCode::unsupported,
                  std::string("FASTATTN_CPU_BF16_DOT=native: expected a CPU with AVX-512 BF16 (ISA avx512bf16), got ") +
                      to_string(isa));
    }
    return Bf16Dot::native;
  }
  return (isa == Isa::avx512bf16 || isa == Isa::amx) && bf16_dot_speed_ratio() >= kBf16DotMinRatio ? Bf16Dot::native
                                                                                                  : Bf16Dot::off;
}

std::string ratio_text(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", ratio);
  return text;
}

double bf16_dot_speed_ratio() {
#if FASTATTN_HAVE_AVX512
  static const double ratio =
      detect_isa() == Isa::avx512bf16 || detect_isa() == Isa::amx ? bf16_dot_speed_ratio_avx512() : 0.0;
  return ratio;
#else
  return 0.0;
#endif
}

amx::AmxMode forward_amx_mode(Isa isa, DType dtype, std::int64_t head_dim, std::string* why) {
  std::string note;
  const amx::AmxMode mode = [&] {
    if (dtype != DType::bf16 || isa == Isa::none) return amx::AmxMode::off;
    const amx::AmxMode requested = amx::amx_mode();  // throws on a bad value
    const bool from_env = amx::amx_mode_from_environment();
    if (requested == amx::AmxMode::off) {
      note = from_env ? "AMX off (FASTATTN_CPU_AMX=off)" : std::string("no AMX: ") + amx::amx_unavailable_reason();
      return amx::AmxMode::off;
    }
    if (head_dim % 32 != 0) {
      note = "no AMX kernel for head_dim " + std::to_string(head_dim) + " (needs a multiple of 32)";
      return amx::AmxMode::off;
    }
    if (requested == amx::AmxMode::emulated) {
      note = "AMX kernel with the tiles emulated (FASTATTN_CPU_AMX=emulated, a test path)";
      return amx::AmxMode::emulated;
    }
    const char* dot = env_value(EnvVar::cpu_bf16_dot);
    const std::string dot_mode = dot ? dot : "";
    if (!from_env && (dot_mode == "native" || dot_mode == "emulated")) {
      note = "AMX not used: FASTATTN_CPU_BF16_DOT=" + dot_mode + " asks for the bf16-pair kernel";
      return amx::AmxMode::off;
    }
    if (isa != Isa::amx) {
      if (from_env) {
        throw Error(ErrorCode::unsupported,
                    std::string("FASTATTN_CPU_AMX=native: expected the CPU ISA amx, got ") + to_string(isa) +
                        " (FASTATTN_CPU_ISA caps it)");
      }
      note = std::string("AMX not used: FASTATTN_CPU_ISA caps the ISA at ") + to_string(isa);
      return amx::AmxMode::off;
    }
    note = "bf16 products on AMX tiles (tdpbf16ps), softmax on AVX-512";
    return amx::AmxMode::native;
  }();
  if (why) *why = note;
  return mode;
}

}  // namespace fastattn::cpu
