// environment.hpp — the one place the FASTATTN_* environment variables are read
// (fastattn/environment.hpp is the public side).
//
// A snapshot holds each variable's raw text, taken at the first environment() and replaced by
// reload_environment(); every consumer parses its own variable from the snapshot on each call,
// so a bad value is an error of the call that uses it, naming the variable. No getenv on the
// call path: it is not thread-safe against a setenv on another thread, and it walked `environ`
// up to 8 times a call.
#pragma once

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "fastattn/environment.hpp"
#include "fastattn/error.hpp"

namespace fastattn {

enum class EnvVar {
  cpu_isa,              // FASTATTN_CPU_ISA            src/cpu/isa.cpp
  cpu_bf16_dot,         // FASTATTN_CPU_BF16_DOT       src/cpu/isa.cpp
  cpu_amx,              // FASTATTN_CPU_AMX            src/cpu/amx.cpp
  cuda_path,            // FASTATTN_CUDA_PATH          src/cuda/forward_path.hpp
  cuda_num_splits,      // FASTATTN_CUDA_NUM_SPLITS    src/cuda/flash_fwd/heuristics.hpp
  cuda_bwd_blocks,      // FASTATTN_CUDA_BWD_BLOCKS    src/cuda/flash_bwd/plan.hpp
  cuda_bwd_tail_split,  // FASTATTN_CUDA_BWD_TAIL_SPLIT src/cuda/flash_bwd/plan.hpp
  device_memory_limit,  // FASTATTN_DEVICE_MEMORY_LIMIT src/api/device_memory.cpp
  cpu_decode,           // FASTATTN_CPU_DECODE         src/cpu/decode_plan.cpp
  cpu_decode_splits,    // FASTATTN_CPU_DECODE_SPLITS  src/cpu/decode_plan.cpp
  cuda_sm90_overlap,    // FASTATTN_CUDA_SM90_OVERLAP  src/cuda/flash_fwd_sm90/plan.hpp
  cuda_bwd_sm90,        // FASTATTN_CUDA_BWD_SM90      src/cuda/flash_bwd_sm90/plan.hpp
  cuda_sm90_bwd_dq,     // FASTATTN_CUDA_SM90_BWD_DQ   src/cuda/flash_bwd_sm90/plan.hpp
  cuda_sm90_bwd_order,  // FASTATTN_CUDA_SM90_BWD_ORDER src/cuda/flash_bwd_sm90/plan.hpp
  cuda_sm90_scheduler,  // FASTATTN_CUDA_SM90_SCHEDULER src/cuda/flash_fwd_sm90/plan.hpp
  cuda_kv_load,         // FASTATTN_CUDA_KV_LOAD       src/cuda/inference/kv_cache_plan.cu
  cuda_kv_pdl,          // FASTATTN_CUDA_KV_PDL        src/cuda/inference/kv_cache_plan.cu
  cuda_sm90_block_n,    // FASTATTN_CUDA_SM90_BLOCK_N  src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_wg_order,   // FASTATTN_CUDA_SM90_WG_ORDER src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_tma_store,  // FASTATTN_CUDA_SM90_TMA_STORE src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_sections,   // FASTATTN_CUDA_SM90_SECTIONS src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_d64_tile,   // FASTATTN_CUDA_SM90_D64_TILE src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_bwd_group_pairs,  // FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS src/cuda/flash_bwd_sm90/plan.hpp
  cuda_sm90_cluster,    // FASTATTN_CUDA_SM90_CLUSTER  src/cuda/flash_fwd_sm90/plan.hpp
  cuda_sm90_d128_tile,  // FASTATTN_CUDA_SM90_D128_TILE src/cuda/flash_fwd_sm90/plan.hpp
};
inline constexpr std::size_t kEnvVarCount = 25;

// "FASTATTN_CPU_ISA", ...
const char* env_name(EnvVar var) noexcept;

// The raw values of every EnvVar at one moment.
class EnvironmentSnapshot {
 public:
  // getenv of each variable, now.
  static EnvironmentSnapshot from_process();
  // The value, or nullptr when the variable is unset. Lives as long as the snapshot.
  const char* get(EnvVar var) const noexcept;

 private:
  std::array<std::optional<std::string>, kEnvVarCount> values_;
};

// The process's current snapshot (taken at the first call). A lock-free read after the first.
// The reference stays valid for the life of the process: reload_environment() installs a new
// snapshot and keeps the old ones (a few hundred bytes each), so a reader on another thread
// never sees freed memory.
const EnvironmentSnapshot& environment();

// environment().get(var): the current raw value, nullptr when unset.
inline const char* env_value(EnvVar var) { return environment().get(var); }

// A two-valued environment variable (from the process's snapshot):
// `on_value` -> true, `off_value` -> false, unset or empty -> `unset`; anything else is an
// invalid_argument error naming the variable.
inline bool env_switch(EnvVar var, const char* on_value, const char* off_value, bool unset) {
  const char* name = env_name(var);
  const char* v = env_value(var);
  if (v == nullptr || *v == '\0') return unset;
  if (std::string(v) == on_value) return true;
  if (std::string(v) == off_value) return false;
  throw Error(ErrorCode::invalid_argument, std::string(name) + ": expected `" + on_value + "` or `" + off_value +
                                               "`, got `" + v + "`");
}

// A variable of a few named values (from the process's snapshot): the value whose text it holds,
// `unset` when unset or empty; anything else is an invalid_argument error naming the variable
// and listing the texts ("NAME: expected a, b or c, got \"x\"").
template <class T>
T env_choice(EnvVar var, std::initializer_list<std::pair<const char*, T>> choices, T unset) {
  const char* v = env_value(var);
  if (v == nullptr || *v == '\0') return unset;
  std::string expected;
  std::size_t i = 0;
  for (const auto& [text, value] : choices) {
    if (std::string(v) == text) return value;
    expected += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(text);
    ++i;
  }
  throw Error(ErrorCode::invalid_argument,
              std::string(env_name(var)) + ": expected " + expected + ", got \"" + v + "\"");
}

// An integer variable in [lo, hi] (from the process's snapshot): `unset` when unset or empty;
// anything else (not a whole decimal integer, out of range) is an invalid_argument error naming
// the variable, the range and the text ("NAME: expected an integer in [1, 64], got '0'").
inline std::int64_t env_integer(EnvVar var, std::int64_t lo, std::int64_t hi, std::int64_t unset) {
  const char* v = env_value(var);
  if (v == nullptr || *v == '\0') return unset;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0' || n < lo || n > hi) {
    throw Error(ErrorCode::invalid_argument, std::string(env_name(var)) + ": expected an integer in [" +
                                                 std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + v +
                                                 "'");
  }
  return n;
}

}  // namespace fastattn
