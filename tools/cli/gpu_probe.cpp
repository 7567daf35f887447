// gpu_probe.cpp — CUDA driver API through dlopen: the CLI neither links nor needs CUDA.
#include "gpu_probe.hpp"

#include <dlfcn.h>

namespace fastattn::cli {

namespace {

// The few driver API entry points used, with their C signatures (CUresult is an int enum,
// CUdevice an int).
using CuInit = int (*)(unsigned);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceTotalMem = int (*)(std::size_t*, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

GpuProbe probe_gpus() {
  GpuProbe probe;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    probe.note = "no CUDA driver (libcuda.so.1 not found)";
    return probe;
  }
  const auto init = symbol<CuInit>(lib, "cuInit");
  const auto get_count = symbol<CuDeviceGetCount>(lib, "cuDeviceGetCount");
  const auto get = symbol<CuDeviceGet>(lib, "cuDeviceGet");
  const auto get_name = symbol<CuDeviceGetName>(lib, "cuDeviceGetName");
  const auto total_mem = symbol<CuDeviceTotalMem>(lib, "cuDeviceTotalMem_v2");
  const auto get_attr = symbol<CuDeviceGetAttribute>(lib, "cuDeviceGetAttribute");
  int count = 0;
  if (!init || !get_count || !get || !get_name || !total_mem || !get_attr) {
    probe.note = "libcuda.so.1 lacks the driver API entry points";
  } else if (const int rc = init(0); rc != 0) {
    probe.note = "cuInit failed with CUresult " + std::to_string(rc);
  } else if (get_count(&count) == 0) {
    probe.driver_found = true;
    for (int i = 0; i < count; ++i) {
      int dev = 0;
      if (get(&dev, i) != 0) continue;
      GpuDevice d;
      d.ordinal = i;
      char name[256] = {};
      if (get_name(name, sizeof name - 1, dev) == 0) d.name = name;
      total_mem(&d.memory_bytes, dev);
      get_attr(&d.cc_major, kAttrComputeCapabilityMajor, dev);
      get_attr(&d.cc_minor, kAttrComputeCapabilityMinor, dev);
      probe.devices.push_back(d);
    }
  }
  // libcuda stays loaded for the rest of this short-lived process; the probe runs once.
  return probe;
}

}  // namespace fastattn::cli
