// forward_path.hpp — which per-architecture forward path runs a CUDA call (host-only, no CUDA
// headers: the dispatcher and the CPU unit tests include it).
//
// The Hopper path, sm90 (flash_fwd_sm90/: TMA, wgmma, warp specialisation; sm_90a code), is
// chosen automatically on compute capability 9.0 when this build compiled it (FASTATTN_CUDA_ARCHS
// has 90); calls it does not serve run on the sm80 kernels, and KernelChoice::reason says why
// (flash_fwd/heuristics.hpp). The backward of an sm90 device runs the sm90 backward where
// flash_bwd_sm90/plan.hpp's choose_sm90_backward serves the call (the default since it measured
// 1.11x the sm80 backward on the H200; FASTATTN_CUDA_BWD_SM90=0 keeps the sm80 one), otherwise
// the sm80 kernels of backward_path_for, with the reason.
//
// One kernel design (flash_fwd/kernel.cuh) with three sets of per-architecture parts:
//   sm80  mma.sync m16n8k16 + ldmatrix + cp.async, swizzled shared memory (Ampere and newer)
//   sm75  mma.sync m16n8k8 + ldmatrix, register-staged prefetch, <= 64 KB shared memory (Turing)
//   sm70  mma.sync m8n8k4 (quad pairs), ld.shared on padded rows, register-staged prefetch,
//         <= 96 KB shared memory (Volta)
// The path follows the device's compute capability; FASTATTN_CUDA_PATH=sm70|sm75|sm80|sm90|auto
// forces one on a newer GPU (tests run the Volta and Turing paths on an H200 this way). The
// backward follows the same path (flash_bwd/kernel.cuh has the same three sets of parts).
#pragma once

#include <cstdlib>
#include <string>

#include "common/environment.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda {

enum class ForwardPath { sm80, sm75, sm70, sm90 };  // sm90 last: an index in caches

constexpr const char* kForwardPathEnv = "FASTATTN_CUDA_PATH";

inline const char* to_string(ForwardPath path) {
  switch (path) {
    case ForwardPath::sm75: return "sm75";
    case ForwardPath::sm70: return "sm70";
    case ForwardPath::sm90: return "sm90";
    default: return "sm80";
  }
}

// The GPUs a path is for, in words.
inline const char* path_gpus(ForwardPath path) {
  switch (path) {
    case ForwardPath::sm75: return "Turing";
    case ForwardPath::sm70: return "Volta";
    case ForwardPath::sm90: return "Hopper";
    default: return "Ampere and newer";
  }
}

// The lowest compute capability (major * 10 + minor) a path's instructions run on.
constexpr int min_compute_capability(ForwardPath path) {
  return path == ForwardPath::sm90 ? 90 : path == ForwardPath::sm80 ? 80 : path == ForwardPath::sm75 ? 75 : 70;
}

// What FASTATTN_CUDA_PATH asks for: automatic (unset, empty or "auto") or one path.
struct ForwardPathRequest {
  bool automatic = true;
  ForwardPath path = ForwardPath::sm80;
};

// Parses a FASTATTN_CUDA_PATH value (null: unset). Throws invalid_argument naming the variable.
inline ForwardPathRequest parse_forward_path(const char* text) {
  ForwardPathRequest r;
  if (text == nullptr || *text == '\0') return r;
  const std::string s = text;
  if (s == "auto") return r;
  r.automatic = false;
  if (s == "sm80") {
    r.path = ForwardPath::sm80;
  } else if (s == "sm75") {
    r.path = ForwardPath::sm75;
  } else if (s == "sm70") {
    r.path = ForwardPath::sm70;
  } else if (s == "sm90") {
    r.path = ForwardPath::sm90;
  } else {
    throw Error(ErrorCode::invalid_argument,
                std::string(kForwardPathEnv) + ": expected sm70, sm75, sm80, sm90 or auto, got \"" + s + "\"");
  }
  return r;
}

// FASTATTN_CUDA_PATH, from the process's snapshot (common/environment.hpp).
inline ForwardPathRequest forward_path_request() { return parse_forward_path(env_value(EnvVar::cuda_path)); }

// The path for a device of compute capability `cc`: the newest the device runs, or the forced
// one, which the device must be able to run. sm90_runs: this build has sm90 units that run on
// the device (sm_90a code runs on compute capability 9.0 alone; cuda_backend.cu decides).
inline ForwardPath select_forward_path(int cc, const ForwardPathRequest& request, bool sm90_runs = false) {
  if (request.automatic) {
    if (cc == 90 && sm90_runs) return ForwardPath::sm90;
    if (cc >= 80) return ForwardPath::sm80;
    if (cc >= 75) return ForwardPath::sm75;
    if (cc >= 70) return ForwardPath::sm70;
    throw Error(ErrorCode::unsupported, "cuda forward: expected a GPU of compute capability >= 7.0, got " +
                                            std::to_string(cc / 10) + "." + std::to_string(cc % 10));
  }
  if (cc < min_compute_capability(request.path)) {
    throw Error(ErrorCode::unsupported, std::string(kForwardPathEnv) + "=" + to_string(request.path) +
                                            ": the path needs compute capability >= " +
                                            std::to_string(min_compute_capability(request.path) / 10) + "." +
                                            std::to_string(min_compute_capability(request.path) % 10) +
                                            ", this GPU has " + std::to_string(cc / 10) + "." +
                                            std::to_string(cc % 10));
  }
  return request.path;
}

// Whether code compiled for the CMake CUDA architectures `archs` (e.g. "75;90"; an entry N
// embeds sm_N SASS and compute_N PTX, N-real the SASS alone, N-virtual the PTX alone; N may
// carry a suffix letter, 90a) runs on a device of compute capability cc (major * 10 + minor):
// SASS runs on the same major version with an equal or higher minor, PTX is JIT-compiled for
// any cc >= N (CUDA C++ Programming Guide, "Binary Compatibility" / "PTX Compatibility"). An
// "a" (arch-specific) target runs only on exactly that cc.
inline bool archs_run_on(const std::string& archs, int cc) {
  std::size_t start = 0;
  while (start <= archs.size()) {
    std::size_t end = archs.find(';', start);
    if (end == std::string::npos) end = archs.size();
    const std::string entry = archs.substr(start, end - start);
    start = end + 1;
    std::size_t digits = 0;
    while (digits < entry.size() && entry[digits] >= '0' && entry[digits] <= '9') ++digits;
    if (digits == 0) continue;
    const int n = std::atoi(entry.substr(0, digits).c_str());
    const std::string rest = entry.substr(digits);
    const bool arch_specific = !rest.empty() && rest[0] == 'a';
    const bool real_only = rest.find("-real") != std::string::npos;
    const bool virtual_only = rest.find("-virtual") != std::string::npos;
    if (arch_specific) {
      if (cc == n) return true;
      continue;
    }
    if (!virtual_only && cc / 10 == n / 10 && cc >= n) return true;  // SASS
    if (!real_only && cc >= n) return true;                           // PTX, JIT-compiled
  }
  return false;
}

// Whether `path` has a forward kernel for (f16 = !bf16, head_dim) at all (independent of what
// this build compiled): sm75 and sm70 are f16 only (m16n8k8 / m8n8k4 take no bf16), and sm70
// stops at head_dim 128 (its 32-row warp tile keeps a 32 x head_dim f32 O accumulator in
// registers, which at d = 256 would spill).
inline bool path_supports(ForwardPath path, bool bf16, long long head_dim) {
  if (path == ForwardPath::sm80 || path == ForwardPath::sm90) return true;  // sm90 hands the rest to sm80
  if (bf16) return false;
  return path == ForwardPath::sm75 || head_dim <= 128;
}

// The backward's non-Hopper path on a device whose forward path is `path`: the sm80 kernels
// where the forward runs sm90 (what the backward runs when choose_sm90_backward declines).
constexpr ForwardPath backward_path_for(ForwardPath path) {
  return path == ForwardPath::sm90 ? ForwardPath::sm80 : path;
}

// The same for the backward: sm75 and sm70 both stop at head_dim 128 there
// (flash_bwd/plan.hpp: backward_blocks_sm75 / _sm70).
inline bool backward_path_supports(ForwardPath path, bool bf16, long long head_dim) {
  return path == ForwardPath::sm80 || (!bf16 && head_dim <= 128);
}

}  // namespace fastattn::cuda
