// cpu_features.cpp — CPUID and XGETBV decoding.
#include "cpu_features.hpp"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define FASTATTN_PERF_X86 1
#endif

namespace fastattn::perf {

namespace {

#ifdef FASTATTN_PERF_X86
struct Regs {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(unsigned leaf, unsigned subleaf = 0) {
  Regs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

bool bit(unsigned value, int index) { return ((value >> index) & 1u) != 0; }

// XCR0: which register states the OS saves on context switch. Inline asm keeps this file
// free of -mxsave.
std::uint64_t read_xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
#endif

// The highest-level cache of cpu0 in /sys/devices/system/cpu/cpu0/cache/index*/ (level, size);
// 0 where there is no such directory (not Linux, or a VM that hides it).
std::int64_t read_last_level_cache_bytes() {
  int best_level = 0;
  std::int64_t best_bytes = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), size_file(dir + "size");
    int level = 0;
    std::string size;
    if (!(level_file >> level) || !(size_file >> size)) continue;
    const std::int64_t bytes = parse_cache_size(size);
    if (level > best_level || (level == best_level && bytes > best_bytes)) {
      best_level = level;
      best_bytes = bytes;
    }
  }
  return best_bytes;
}

}  // namespace

std::int64_t parse_cache_size(std::string_view text) {
  std::int64_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (value > (std::int64_t{1} << 40)) return 0;  // no cache is that large: not a size
    value = value * 10 + (text[i] - '0');
  }
  if (i == 0) return 0;
  const std::string_view unit = text.substr(i);
  const int shift = unit.empty() ? 0 : unit == "K" ? 10 : unit == "M" ? 20 : unit == "G" ? 30 : -1;
  if (shift < 0 || value > ((std::int64_t{1} << 40) >> shift)) return 0;  // over 1 TiB: not a cache
  return value << shift;
}

std::vector<std::string> CpuFeatures::present() const {
  std::vector<std::string> names;
  const std::pair<bool, const char*> all[] = {{avx2, "avx2"},         {fma, "fma"},
                                              {f16c, "f16c"},         {avx512f, "avx512f"},
                                              {avx512bw, "avx512bw"}, {avx512vl, "avx512vl"},
                                              {avx512dq, "avx512dq"}, {avx512_bf16, "avx512_bf16"},
                                              {amx_tile, "amx_tile"}, {amx_bf16, "amx_bf16"},
                                              {amx_int8, "amx_int8"}};
  for (const auto& [has, name] : all)
    if (has) names.emplace_back(name);
  return names;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  f.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  f.last_level_cache_bytes = read_last_level_cache_bytes();
#ifdef FASTATTN_PERF_X86
  const Regs leaf0 = cpuid(0);
  char vendor[13] = {};
  std::memcpy(vendor + 0, &leaf0.ebx, 4);
  std::memcpy(vendor + 4, &leaf0.edx, 4);
  std::memcpy(vendor + 8, &leaf0.ecx, 4);
  f.vendor = vendor;

  if (cpuid(0x80000000u).eax >= 0x80000004u) {
    char brand[49] = {};
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i);
      std::memcpy(brand + 16 * i + 0, &r.eax, 4);
      std::memcpy(brand + 16 * i + 4, &r.ebx, 4);
      std::memcpy(brand + 16 * i + 8, &r.ecx, 4);
      std::memcpy(brand + 16 * i + 12, &r.edx, 4);
    }
    std::string model = brand;
    const auto first = model.find_first_not_of(' ');
    const auto last = model.find_last_not_of(' ');
    f.model = first == std::string::npos ? "" : model.substr(first, last - first + 1);
  }

  const unsigned max_leaf = leaf0.eax;
  if (max_leaf < 1) return f;
  const Regs leaf1 = cpuid(1);
  const bool osxsave = bit(leaf1.ecx, 27);
  const std::uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6u) == 0x6u;                 // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xE0u) == 0xE0u;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000u) == 0x60000u;         // XTILECFG, XTILEDATA

  f.fma = os_avx && bit(leaf1.ecx, 12);
  f.f16c = os_avx && bit(leaf1.ecx, 29);
  if (max_leaf < 7) return f;
  const Regs leaf7 = cpuid(7, 0);
  f.avx2 = os_avx && bit(leaf7.ebx, 5);
  f.avx512f = os_avx512 && bit(leaf7.ebx, 16);
  f.avx512dq = os_avx512 && bit(leaf7.ebx, 17);
  f.avx512bw = os_avx512 && bit(leaf7.ebx, 30);
  f.avx512vl = os_avx512 && bit(leaf7.ebx, 31);
  f.amx_bf16 = os_amx && bit(leaf7.edx, 22);
  f.amx_tile = os_amx && bit(leaf7.edx, 24);
  f.amx_int8 = os_amx && bit(leaf7.edx, 25);
  if (leaf7.eax >= 1) f.avx512_bf16 = os_avx512 && bit(cpuid(7, 1).eax, 5);
#endif
  return f;
}

}  // namespace fastattn::perf
