// test_support.hpp — small helpers shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "fastattn/fastattn.hpp"
#include "harness/harness.hpp"

namespace fastattn::testing {

// Fails the test with the full report (case string, kernels, per-tensor errors and bounds).
inline void expect_pass(const harness::CheckReport& r) {
  EXPECT_TRUE(r.pass) << r.to_string();
}

// Base fixture of GPU tests (label `gpu`): skipped unless fastattn was built with CUDA.
// Device presence is the CUDA backend's business; tests that need a device call
// fastattn::forward with Backend::cuda and skip on ErrorCode::device_error.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const BuildInfo info = fastattn::build_info();
    if (!info.cuda_compiled) GTEST_SKIP() << "fastattn was built without CUDA";
    if (info.cuda_devices.empty()) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

// Why a test of the sm90 (Hopper) kernels cannot run here: empty when device 0's path is sm90
// (a build with 90 in FASTATTN_CUDA_ARCHS, a compute capability 9.0 GPU, FASTATTN_CUDA_PATH
// unset or sm90).
inline std::string sm90_path_missing(const BuildInfo& info) {
  if (!info.cuda_device_paths.empty() && info.cuda_device_paths.front().rfind("sm90", 0) == 0) return {};
  return "the device's path is not sm90: " +
         (info.cuda_device_paths.empty() ? std::string("no device") : info.cuda_device_paths.front());
}

// The built CUDA head dims (in the build's order) that `wanted` accepts: a GPU fixture's dims
// to test, empty when the build has none of them.
template <class Wanted>
std::vector<int> built_head_dims(const BuildInfo& info, Wanted&& wanted) {
  std::vector<int> dims;
  for (int d : info.cuda_head_dims) {
    if (wanted(d)) dims.push_back(d);
  }
  return dims;
}
// The same for a list of head dims.
inline std::vector<int> built_head_dims(const BuildInfo& info, std::initializer_list<int> wanted) {
  return built_head_dims(info, [wanted](int d) { return std::find(wanted.begin(), wanted.end(), d) != wanted.end(); });
}

// Expects `fn` to throw fastattn::Error with `code` and a message containing `needle`.
template <typename Fn>
void expect_error(Fn&& fn, ErrorCode code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected fastattn::Error containing \"" << needle << "\", nothing thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected fastattn::Error, got another exception: " << e.what();
  }
}

// Sets (or, with nullopt, unsets) an environment variable for a scope and restores the previous
// state after, e.g. FASTATTN_CUDA_NUM_SPLITS in the split-KV tests. fastattn reads its variables
// once per process (fastattn/environment.hpp), so both ends call reload_environment().
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
    fastattn::reload_environment();
  }
  ~ScopedEnv() {
    if (saved_) {
      setenv(name_, saved_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
    fastattn::reload_environment();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// FASTATTN_CUDA_PATH=sm75 / sm70 (the ctest entries gpu_*_sm75 / gpu_*_sm70) forces the Turing
// or Volta kernels: f16 only; head_dim <= 128 on sm70, and in both backward kernels.
inline std::string forced_cuda_path() {
  const char* v = std::getenv("FASTATTN_CUDA_PATH");
  return v != nullptr ? v : "";
}
inline bool lowres_path_forced() { return forced_cuda_path() == "sm75" || forced_cuda_path() == "sm70"; }
// A case text for the forced path: its bf16 runs as f16 there (same shape and mask).
inline std::string for_forced_path(std::string text) {
  if (!lowres_path_forced()) return text;
  const std::string bf16 = "dtype=bf16";
  for (std::size_t at = text.find(bf16); at != std::string::npos; at = text.find(bf16)) {
    text.replace(at, bf16.size(), "dtype=f16");
  }
  return text;
}
// Whether the forced path serves head_dim in this direction (all do when nothing is forced).
inline bool forced_path_serves(int head_dim, bool backward) {
  if (!lowres_path_forced()) return true;
  return head_dim <= 128 || (!backward && forced_cuda_path() == "sm75");
}

}  // namespace fastattn::testing
