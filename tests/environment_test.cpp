// environment_test.cpp — issue 14's host-side hardening (ctest label `cpu`):
//   * the FASTATTN_* variables are read once per process (common/environment.hpp) and again
//     only at reload_environment(); a bad value is an error of the first call that uses it;
//   * the check on a caller's CUDA Workspace (cuda/common/workspace_check.hpp), which the
//     forward and the backward share;
//   * the device guard both CUDA directions hold (cuda/common/device_guard.hpp), on a fake device
//     API, so the restore logic is tested without a GPU (or with only one).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/environment.hpp"
#include "cuda/common/device_guard.hpp"
#include "cuda/common/workspace_check.hpp"
#include "test_support.hpp"

namespace fastattn::testing {
namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30;

// A small CPU forward, f32, [1, 8, 2, 16].
struct TinyForward {
  std::vector<float> q = std::vector<float>(1 * 8 * 2 * 16, 0.25f);
  std::vector<float> out = std::vector<float>(q.size(), 0.0f);
  KernelChoice run() {
    const TensorView t = make_tensor(q.data(), DType::f32, {1, 8, 2, 16});
    const TensorView o = make_tensor(out.data(), DType::f32, {1, 8, 2, 16});
    AttentionOptions options;
    options.backend = Backend::cpu;
    return forward(t, t, t, o, std::nullopt, options);
  }
};

TEST(Environment, NamesEveryVariable) {
  const std::vector<std::string> names = {"FASTATTN_CPU_ISA",         "FASTATTN_CPU_BF16_DOT",
                                          "FASTATTN_CPU_AMX",         "FASTATTN_CUDA_PATH",       "FASTATTN_CUDA_NUM_SPLITS",  "FASTATTN_CUDA_BWD_BLOCKS", "FASTATTN_CUDA_BWD_TAIL_SPLIT",
                                          "FASTATTN_DEVICE_MEMORY_LIMIT", "FASTATTN_CPU_DECODE", "FASTATTN_CPU_DECODE_SPLITS",
                                          "FASTATTN_CUDA_SM90_OVERLAP", "FASTATTN_CUDA_BWD_SM90", "FASTATTN_CUDA_SM90_BWD_DQ",
                                          "FASTATTN_CUDA_SM90_BWD_ORDER", "FASTATTN_CUDA_SM90_SCHEDULER",
                                          "FASTATTN_CUDA_KV_LOAD", "FASTATTN_CUDA_KV_PDL",
                                          "FASTATTN_CUDA_SM90_BLOCK_N", "FASTATTN_CUDA_SM90_WG_ORDER",
                                          "FASTATTN_CUDA_SM90_TMA_STORE", "FASTATTN_CUDA_SM90_SECTIONS",
                                          "FASTATTN_CUDA_SM90_D64_TILE", "FASTATTN_CUDA_SM90_BWD_GROUP_PAIRS",
                                          "FASTATTN_CUDA_SM90_CLUSTER", "FASTATTN_CUDA_SM90_D128_TILE"};
  ASSERT_EQ(names.size(), kEnvVarCount);
  for (std::size_t i = 0; i < kEnvVarCount; ++i) {
    const auto var = static_cast<EnvVar>(i);
    EXPECT_EQ(env_name(var), names[i]);
    const ScopedEnv env(names[i].c_str(), "value-" + std::to_string(i));  // reloads
    ASSERT_NE(env_value(var), nullptr) << names[i];
    EXPECT_STREQ(env_value(var), ("value-" + std::to_string(i)).c_str());
  }
  const ScopedEnv unset("FASTATTN_CUDA_PATH", std::nullopt);
  EXPECT_EQ(env_value(EnvVar::cuda_path), nullptr);
}

// The old behaviour (getenv on every call) sees the change without a reload.
TEST(Environment, ChangesAreSeenAtReloadOnly) {
  const ScopedEnv env(kDeviceMemoryLimitEnv, std::string("16G"));
  EXPECT_EQ(device_memory_limit().bytes, 16 * kGiB);
  setenv(kDeviceMemoryLimitEnv, "32G", 1);
  EXPECT_EQ(device_memory_limit().bytes, 16 * kGiB) << "read again without reload_environment()";
  reload_environment();
  EXPECT_EQ(device_memory_limit().bytes, 32 * kGiB);
  EXPECT_EQ(device_memory_limit().source, "FASTATTN_DEVICE_MEMORY_LIMIT=32G");
}

TEST(Environment, CallsKeepTheSnapshotWhenTheEnvironmentChanges) {
  const ScopedEnv env("FASTATTN_CPU_ISA", std::nullopt);
  TinyForward call;
  call.run();
  setenv("FASTATTN_CPU_ISA", "bogus", 1);  // not seen: no reload
  EXPECT_NO_THROW(call.run());
}

// Reloading does not check values; the first call that uses the variable does, naming it.
TEST(Environment, ABadValueIsAnErrorOfTheFirstCallNotOfTheReload) {
  {
    const ScopedEnv env("FASTATTN_CPU_ISA", std::string("bogus"));  // reloads
    EXPECT_NO_THROW(reload_environment());
    TinyForward call;
    expect_error([&] { call.run(); }, ErrorCode::invalid_argument,
                 "FASTATTN_CPU_ISA: expected one of none, avx2, avx512, avx512bf16, amx, got 'bogus'");
    expect_error([&] { call.run(); }, ErrorCode::invalid_argument, "FASTATTN_CPU_ISA");  // every call
  }
  TinyForward call;
  EXPECT_NO_THROW(call.run());  // ScopedEnv restored the variable and reloaded
}

// Readers on several threads while another reloads: every read sees one whole snapshot.
TEST(Environment, ReloadIsThreadSafe) {
  const ScopedEnv env(kDeviceMemoryLimitEnv, std::string("16G"));
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const std::size_t bytes = device_memory_limit().bytes;
        if (bytes != 16 * kGiB) bad.fetch_add(1);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) reload_environment();
  stop.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// ---- the caller's Workspace of a CUDA call -------------------------------------------------

TEST(WorkspaceCheck, AcceptsAnAlignedWorkspaceLargeEnough) {
  alignas(256) static unsigned char memory[1024];
  EXPECT_NO_THROW(cuda::check_workspace(Workspace{memory, 1024}, 1024));
  EXPECT_NO_THROW(cuda::check_workspace(Workspace{memory, 1024}, 512));
}

TEST(WorkspaceCheck, NamesTheWorkspaceExpectedAndActual) {
  alignas(256) static unsigned char memory[2048];
  expect_error([&] { cuda::check_workspace(Workspace{memory + 8, 1024}, 1024); }, ErrorCode::invalid_argument,
               "options.workspace: expected data aligned to 256 bytes for the CUDA kernels, got an address "
               "256 * k + 8");
  expect_error([&] { cuda::check_workspace(Workspace{memory + 128, 1024}, 1024); }, ErrorCode::invalid_argument,
               "got an address 256 * k + 128");
  expect_error([&] { cuda::check_workspace(Workspace{memory, 512}, 1024); }, ErrorCode::invalid_argument,
               "options.workspace: expected at least 1024 bytes, got 512");
  expect_error([&] { cuda::check_workspace(Workspace{nullptr, 4096}, 1024); }, ErrorCode::invalid_argument,
               "options.workspace: expected at least 1024 bytes, got 0 (null data)");
}

// ---- the device guard, on a fake device API -----------------------------------------------

struct FakeDevices {
  static inline int current_device = 0;
  static inline int switches = 0;
  static inline int restores = 0;
  static inline bool fail_switch = false;
  static void reset(int device) {
    current_device = device;
    switches = restores = 0;
    fail_switch = false;
  }
  static int current() { return current_device; }
  static void make_current(int device) {
    if (fail_switch) throw Error(ErrorCode::device_error, "cudaSetDevice failed");
    ++switches;
    current_device = device;
  }
  static void restore(int device) noexcept {
    ++restores;
    current_device = device;
  }
};
using FakeGuard = cuda::BasicDeviceGuard<FakeDevices>;

TEST(DeviceGuard, LeavesTheDeviceAloneWhenItIsCurrent) {
  FakeDevices::reset(1);
  {
    const FakeGuard guard(1);
    EXPECT_FALSE(guard.switched());
    EXPECT_EQ(FakeDevices::current_device, 1);
  }
  EXPECT_EQ(FakeDevices::switches, 0);
  EXPECT_EQ(FakeDevices::restores, 0);
}

TEST(DeviceGuard, SwitchesAndRestores) {
  FakeDevices::reset(1);
  {
    const FakeGuard guard(0);
    EXPECT_TRUE(guard.switched());
    EXPECT_EQ(guard.previous(), 1);
    EXPECT_EQ(FakeDevices::current_device, 0);
  }
  EXPECT_EQ(FakeDevices::current_device, 1);
  EXPECT_EQ(FakeDevices::restores, 1);
}

TEST(DeviceGuard, RestoresWhenTheScopeThrows) {
  FakeDevices::reset(2);
  EXPECT_THROW(
      {
        const FakeGuard guard(0);
        throw Error(ErrorCode::invalid_argument, "a check after the switch");
      },
      Error);
  EXPECT_EQ(FakeDevices::current_device, 2);
  EXPECT_EQ(FakeDevices::restores, 1);
}

TEST(DeviceGuard, RestoresNothingWhenTheSwitchFails) {
  FakeDevices::reset(2);
  FakeDevices::fail_switch = true;
  EXPECT_THROW(FakeGuard guard(0), Error);
  EXPECT_EQ(FakeDevices::current_device, 2);
  EXPECT_EQ(FakeDevices::restores, 0);
}

}  // namespace
}  // namespace fastattn::testing
