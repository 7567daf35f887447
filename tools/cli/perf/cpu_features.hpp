// cpu_features.hpp — what the CPU this process runs on can do (CPUID + OS state support).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fastattn::perf {

// A feature is reported only when the CPU has it AND the OS saves its register state (XCR0),
// i.e. when code using it can run. On non-x86 builds everything is false.
struct CpuFeatures {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string model;   // CPUID brand string, e.g. "AMD EPYC 7B13"
  int logical_cpus = 0;
  // Size of the highest cache level (Linux sysfs, cpu0's caches); 0 when unknown. Read so that
  // benchmarks can say when a working set fits it (a K+V that stays in L3 is not a memory read).
  std::int64_t last_level_cache_bytes = 0;

  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;  // vdpbf16ps
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool amx_int8 = false;

  // The AVX-512 subset the fastattn kernels (and the AVX-512 peak loop) need.
  bool avx512_core() const { return avx512f && avx512bw && avx512vl && avx512dq; }
  // Names of the features present, in a fixed order: {"avx2", "fma", ...}.
  std::vector<std::string> present() const;
};

CpuFeatures detect_cpu_features();

// A sysfs cache size ("32K", "307200K", "2M", "1G", or a plain byte count) in bytes; 0 when the
// text is not one.
std::int64_t parse_cache_size(std::string_view text);

}  // namespace fastattn::perf
