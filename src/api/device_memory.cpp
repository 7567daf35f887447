// device_memory.cpp — memory-capped mode (fastattn/memory.hpp, api/device_memory.hpp).
#include "api/device_memory.hpp"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string>

#include "common/environment.hpp"
#include "fastattn/error.hpp"

namespace fastattn {
namespace {

constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();

std::size_t add_sat(std::size_t a, std::size_t b) { return a > kMax - b ? kMax : a + b; }

std::size_t mul_sat(std::size_t a, std::size_t b) {
  std::size_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kMax : r;
}

std::size_t elems(std::int64_t a, std::int64_t b, std::int64_t c) {
  if (a <= 0 || b <= 0 || c <= 0) return 0;
  return mul_sat(mul_sat(static_cast<std::size_t>(a), static_cast<std::size_t>(b)), static_cast<std::size_t>(c));
}

// The process-wide limit of set_device_memory_limit; nullopt: the environment's.
std::mutex g_mutex;
std::optional<std::size_t> g_limit;

}  // namespace

std::size_t DeviceMemoryNeed::total() const { return add_sat(tensor_bytes, scratch_bytes); }

DeviceMemoryNeed device_memory_need(const AttentionProblem& p, Direction direction,
                                    std::size_t scratch_bytes) {
  const std::size_t element = dtype_size(p.dtype);
  const std::size_t q_bytes = mul_sat(elems(p.total_q, p.num_heads, p.head_dim), element);   // like q
  const std::size_t k_bytes = mul_sat(elems(p.total_k, p.num_kv_heads, p.head_dim), element);  // like k
  const std::size_t lse_bytes = mul_sat(elems(p.total_q, p.num_heads, 1), sizeof(float));
  const bool backward = direction == Direction::backward;
  DeviceMemoryNeed need;
  // forward: q, out | k, v | lse when requested; backward: q, out, dout, dq | k, v, dk, dv | lse.
  need.tensor_bytes = add_sat(mul_sat(q_bytes, backward ? 4 : 2), mul_sat(k_bytes, backward ? 4 : 2));
  if (backward || p.lse != nullptr) need.tensor_bytes = add_sat(need.tensor_bytes, lse_bytes);
  if (p.is_varlen()) {
    const std::size_t cu_bytes = mul_sat(elems(p.batch + 1, 1, 1), sizeof(std::int32_t));
    need.tensor_bytes = add_sat(need.tensor_bytes, mul_sat(cu_bytes, 2));
  }
  need.scratch_bytes = scratch_bytes;
  return need;
}

std::size_t parse_memory_size(const std::string& text, const std::string& name) {
  auto bad = [&]() -> std::size_t {
    throw Error(ErrorCode::invalid_argument,
                name + ": expected bytes or a size with a unit (e.g. 17179869184, 16G, 32GiB, 1.5GB; "
                       "K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB of 1000), got '" +
                    text + "'");
  };
  std::size_t i = 0;
  const std::size_t n = text.size();
  auto skip_space = [&] {
    while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  skip_space();
  // Number: digits, optionally a fraction.
  std::size_t whole = 0;
  bool digits = false, whole_overflow = false;
  while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
    digits = true;
    if (__builtin_mul_overflow(whole, std::size_t{10}, &whole) ||
        __builtin_add_overflow(whole, static_cast<std::size_t>(text[i] - '0'), &whole)) {
      whole_overflow = true;
    }
    ++i;
  }
  long double fraction = 0.0L;
  bool has_fraction = false;
  if (i < n && text[i] == '.') {
    ++i;
    long double place = 0.1L;
    while (i < n && std::isdigit(static_cast<unsigned char>(text[i]))) {
      digits = has_fraction = true;
      fraction += place * static_cast<long double>(text[i] - '0');
      place /= 10.0L;
      ++i;
    }
  }
  if (!digits || whole_overflow) return bad();
  skip_space();
  // Unit.
  std::string unit;
  while (i < n && std::isalpha(static_cast<unsigned char>(text[i]))) {
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    ++i;
  }
  skip_space();
  if (i != n) return bad();
  std::size_t multiplier = 1;
  if (!unit.empty() && unit != "b") {
    const std::string prefixes = "kmgt";
    const std::size_t power = prefixes.find(unit[0]);
    if (power == std::string::npos) return bad();
    const std::string rest = unit.substr(1);
    std::size_t base = 0;
    if (rest.empty() || rest == "i" || rest == "ib") {
      base = 1024;
    } else if (rest == "b") {
      base = 1000;
    } else {
      return bad();
    }
    for (std::size_t p = 0; p <= power; ++p) multiplier *= base;
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(whole, multiplier, &bytes)) return bad();
  if (has_fraction) {
    const long double extra = std::floor(fraction * static_cast<long double>(multiplier) + 0.5L);
    if (__builtin_add_overflow(bytes, static_cast<std::size_t>(extra), &bytes)) return bad();
  }
  return bytes;
}

void set_device_memory_limit(std::optional<std::size_t> bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_limit = bytes;
}

DeviceMemoryLimit device_memory_limit() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_limit) {
      DeviceMemoryLimit l;
      l.bytes = *g_limit;
      if (l.bytes > 0) l.source = "set_device_memory_limit()";
      return l;
    }
  }
  DeviceMemoryLimit l;
  const char* text = env_value(EnvVar::device_memory_limit);
  if (text == nullptr || *text == '\0') return l;
  l.bytes = parse_memory_size(text, kDeviceMemoryLimitEnv);
  if (l.bytes > 0) l.source = std::string(kDeviceMemoryLimitEnv) + "=" + text;
  return l;
}

DeviceMemoryLimit effective_device_memory_limit(std::size_t option_bytes) {
  if (option_bytes > 0) return {option_bytes, "options.device_memory_limit_bytes"};
  return device_memory_limit();
}

std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  std::string s = text;
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  return s + " " + units[unit];
}

std::string device_memory_error(const std::string& what, const DeviceMemoryNeed& need,
                                const DeviceMemoryLimit& limit) {
  const std::size_t total = need.total();
  if (limit.bytes == 0 || total <= limit.bytes) return "";
  return what + ": needs " + format_bytes(total) + " of device memory (tensors " +
         format_bytes(need.tensor_bytes) + " + scratch " + format_bytes(need.scratch_bytes) + " = " +
         std::to_string(total) + " bytes), over the " + format_bytes(limit.bytes) + " limit (" +
         std::to_string(limit.bytes) + " bytes) set by " + limit.source;
}

void check_device_memory(const std::string& what, const DeviceMemoryNeed& need,
                         const DeviceMemoryLimit& limit) {
  const std::string message = device_memory_error(what, need, limit);
  if (!message.empty()) throw Error(ErrorCode::out_of_memory, message);
}

}  // namespace fastattn
