// environment.cpp — see environment.hpp.
#include "common/environment.hpp"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace fastattn {
namespace {

constexpr const char* kNames[kEnvVarCount] = {
    "FASTATTN_CPU_ISA",         "FASTATTN_CPU_BF16_DOT",        "FASTATTN_CPU_AMX",
    "FASTATTN_CUDA_PATH",
    "FASTATTN_CUDA_NUM_SPLITS", "FASTATTN_CUDA_BWD_BLOCKS",     "FASTATTN_CUDA_BWD_TAIL_SPLIT",
    "FASTATTN_DEVICE_MEMORY_LIMIT", "FASTATTN_CPU_DECODE",          "FASTATTN_CPU_DECODE_SPLITS",
    "FASTATTN_CUDA_SM90_OVERLAP", "FASTATTN_CUDA_BWD_SM90",       "FASTATTN_CUDA_SM90_BWD_DQ",
    "FASTATTN_CUDA_SM90_BWD_ORDER",
    "FASTATTN_CUDA_SM90_SCHEDULER", "FASTATTN_CUDA_KV_LOAD",      "FASTATTN_CUDA_KV_PDL",
    "FASTATTN_CUDA_SM90_BLOCK_N", "FASTATTN_CUDA_SM90_WG_ORDER",
    "FASTATTN_CUDA_SM90_TMA_STORE", "FASTATTN_CUDA_SM90_SECTIONS", "FASTATTN_CUDA_SM90_D64_TILE",
    "FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS", "FASTATTN_CUDA_SM90_CLUSTER", "FASTATTN_CUDA_SM90_D128_TILE",
};

std::mutex g_mutex;  // serialises installing snapshots
std::atomic<const EnvironmentSnapshot*> g_current{nullptr};

// Every snapshot ever installed, never freed (see environment.hpp); a leaked heap object so
// that no static destructor runs it down under a thread still reading at exit.
std::vector<std::unique_ptr<const EnvironmentSnapshot>>& installed() {
  static auto* all = new std::vector<std::unique_ptr<const EnvironmentSnapshot>>();
  return *all;
}

// Caller holds g_mutex.
const EnvironmentSnapshot* install(EnvironmentSnapshot snapshot) {
  installed().push_back(std::make_unique<const EnvironmentSnapshot>(std::move(snapshot)));
  const EnvironmentSnapshot* current = installed().back().get();
  g_current.store(current, std::memory_order_release);
  return current;
}

}  // namespace

const char* env_name(EnvVar var) noexcept { return kNames[static_cast<std::size_t>(var)]; }

EnvironmentSnapshot EnvironmentSnapshot::from_process() {
  EnvironmentSnapshot s;
  for (std::size_t i = 0; i < kEnvVarCount; ++i) {
    if (const char* value = std::getenv(kNames[i])) s.values_[i] = value;
  }
  return s;
}

const char* EnvironmentSnapshot::get(EnvVar var) const noexcept {
  const std::optional<std::string>& value = values_[static_cast<std::size_t>(var)];
  return value ? value->c_str() : nullptr;
}

const EnvironmentSnapshot& environment() {
  if (const EnvironmentSnapshot* current = g_current.load(std::memory_order_acquire)) return *current;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (const EnvironmentSnapshot* current = g_current.load(std::memory_order_acquire)) return *current;
  return *install(EnvironmentSnapshot::from_process());
}

void reload_environment() {
  EnvironmentSnapshot fresh = EnvironmentSnapshot::from_process();
  std::lock_guard<std::mutex> lock(g_mutex);
  install(std::move(fresh));
}

}  // namespace fastattn
