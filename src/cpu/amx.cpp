// amx.cpp — AMX detection, the OS permission, FASTATTN_CPU_AMX, and the emulated GEMM entry
// (plain flags: nothing here executes an AMX instruction).
#include "cpu/amx.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "common/environment.hpp"
#include "fastattn/error.hpp"

#ifndef FASTATTN_HAVE_AMX
#define FASTATTN_HAVE_AMX 0
#endif

namespace fastattn::cpu::amx {
namespace {

constexpr int kArchGetXcompPerm = 0x1022;  // linux/arch/x86/include/uapi/asm/prctl.h
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

struct Detection {
  bool available = false;
  std::string reason;
};

#if FASTATTN_HAVE_AMX && (defined(__x86_64__) || defined(__i386__))
unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}
#endif

Detection detect() {
  Detection d;
#if !FASTATTN_HAVE_AMX
  d.reason = "this build has no AMX kernels (CMake FASTATTN_CPU_AMX=OFF or the compiler lacks -mamx-tile)";
  return d;
#elif !(defined(__x86_64__) || defined(__i386__))
  d.reason = "not an x86 CPU";
  return d;
#else
  unsigned a = 0, b = 0, c = 0, dx = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &dx)) {
    d.reason = "CPUID leaf 7 is missing";
    return d;
  }
  if (!(dx & (1u << 24))) {
    d.reason = "the CPU has no AMX-TILE (CPUID.7.0:EDX bit 24)";
    return d;
  }
  if (!(dx & (1u << 22))) {
    d.reason = "the CPU has no AMX-BF16 (CPUID.7.0:EDX bit 22)";
    return d;
  }
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  if (!__get_cpuid(1, &a1, &b1, &c1, &d1) || !(c1 & (1u << 27))) {
    d.reason = "the OS does not enable XSAVE (CPUID.1:ECX.OSXSAVE = 0)";
    return d;
  }
  const unsigned long long xcr0 = read_xcr0();
  if ((xcr0 & (3ull << 17)) != (3ull << 17)) {
    d.reason = "the OS does not enable the AMX tile state in XCR0 (bits 17, 18)";
    return d;
  }
#if defined(__linux__)
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    d.reason = std::string("the OS refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
               std::strerror(errno) + ")";
    return d;
  }
  unsigned long long granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !(granted & (1ull << kXfeatureXtiledata))) {
    d.reason = "the OS did not grant the AMX tile state (arch_prctl ARCH_GET_XCOMP_PERM)";
    return d;
  }
#endif
  d.available = true;
  return d;
#endif
}

const Detection& detection() {
  static std::once_flag once;
  static Detection* d = nullptr;
  std::call_once(once, [] { d = new Detection(detect()); });
  return *d;
}

}  // namespace

bool amx_available() noexcept {
  try {
    return detection().available;
  } catch (...) {
    return false;
  }
}

const char* amx_unavailable_reason() noexcept {
  try {
    return detection().reason.c_str();
  } catch (...) {
    return "AMX detection failed";
  }
}

bool amx_compiled() noexcept { return FASTATTN_HAVE_AMX != 0; }

const char* to_string(AmxMode mode) noexcept {
  switch (mode) {
    case AmxMode::off: return "off";
    case AmxMode::native: return "native";
    case AmxMode::emulated: return "emulated";
  }
  return "unknown";
}

bool amx_mode_from_environment() {
  const char* env = env_value(EnvVar::cpu_amx);
  return env != nullptr && *env != '\0';
}

AmxMode amx_mode() {
  const char* env = env_value(EnvVar::cpu_amx);
  const std::string mode = env ? env : "";
  if (mode.empty()) return amx_available() ? AmxMode::native : AmxMode::off;
  if (mode == "off") return AmxMode::off;
  if (mode == "emulated") return AmxMode::emulated;
  if (mode == "native") {
    if (!amx_available()) {
      throw Error(ErrorCode::unsupported,
                  std::string("FASTATTN_CPU_AMX=native: expected a CPU and OS with AMX, got none: ") +
                      amx_unavailable_reason());
    }
    return AmxMode::native;
  }
  throw Error(ErrorCode::invalid_argument,
              "FASTATTN_CPU_AMX: expected native, emulated or off, got '" + mode + "'");
}

void gemm_bf16_emulated(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                        const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  TileScope<Emulated> scope(gemm_config());
  gemm_bf16<Emulated>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

#if !FASTATTN_HAVE_AMX
void gemm_bf16_native(std::int64_t, std::int64_t, std::int64_t, const std::uint16_t*, std::int64_t,
                      const std::uint32_t*, std::int64_t, float*, std::int64_t, bool) {
  throw Error(ErrorCode::unsupported, std::string("amx gemm: expected a build and CPU with AMX, got none: ") +
                                          amx_unavailable_reason());
}
#endif

}  // namespace fastattn::cpu::amx
