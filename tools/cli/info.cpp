// info.cpp — `fastattn info`: version, build, CPU, GPUs and measured peaks.
#include <algorithm>
#include <fmt/format.h>
#include <omp.h>

#include <string>

#include "commands.hpp"
#include "cpu/amx.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu_features.hpp"
#include "fastattn/fastattn.hpp"
#include "gpu_probe.hpp"
#include "peaks.hpp"
#include "report_json.hpp"

namespace fastattn::cli {

namespace {

std::string join(const std::vector<std::string>& items, const char* separator = ", ") {
  std::string s;
  for (const auto& item : items) s += (s.empty() ? "" : separator) + item;
  return s.empty() ? "none" : s;
}

std::string yes_no(bool value) { return value ? "yes" : "no"; }

void row(const std::string& key, const std::string& value) {
  fmt::print("  {:<20} {}\n", key, value);
}

std::string gflops_or(const std::optional<double>& v, const char* absent) {
  return v ? fmt::format("{:.1f} GFLOP/s", *v) : std::string(absent);
}

}  // namespace

CLI::App* add_info_command(CLI::App& app, InfoArgs& args) {
  CLI::App* cmd = app.add_subcommand("info", "Version, build, CPU and GPUs, measured peaks");
  cmd->add_flag("--no-peaks", args.no_peaks, "Skip the peak measurements (about 2 s)");
  cmd->add_option("--threads", args.threads, "Threads for the peaks (default: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--json", args.json_path, "Also write everything as JSON to this file");
  return cmd;
}

int run_info(const InfoArgs& args, int argc, const char* const* argv) {
  const BuildInfo build = build_info();
  const perf::CpuFeatures cpu = perf::detect_cpu_features();
  const int threads = args.threads > 0 ? args.threads : omp_get_max_threads();

  fmt::print("fastattn {}\n\nbuild\n", build.version);
  row("cpu kernels", join(build.cpu_isas_compiled));
  row("cuda", build.cuda_compiled ? "compiled" : "not compiled");
  if (build.cuda_compiled) {
    row("cuda archs", join(build.cuda_archs_compiled));
    std::vector<std::string> dims;
    for (int d : build.cuda_head_dims) dims.push_back(std::to_string(d));
    // The sm80 units bring bf16 and the decode kernel; a build of the Volta / Turing paths alone
    // (FASTATTN_CUDA_ARCHS=75 or 70) has f16 only.
    const auto& compiled = build.cuda_paths_compiled;
    const bool sm80 = std::find(compiled.begin(), compiled.end(), "sm80") != compiled.end();
    row("cuda kernels", (sm80 ? "forward (split-KV, decode) and backward, f16/bf16, head_dim "
                              : "forward (split-KV) and backward, f16, head_dim ") +
                            join(dims));
    // docs/low-resource-gpus.md: sm75 forward + backward (f16), sm70 forward (f16, d <= 128);
    // docs/cuda-sm90-forward.md and docs/cuda-sm90-backward.md: sm90 forward and backward.
    std::vector<std::string> paths;
    for (const std::string& p : build.cuda_paths_compiled) {
      paths.push_back(p == "sm90"   ? "sm90 (Hopper: forward and backward, head_dim 64/96/128/256, padded and "
                                        "varlen; decode and the calls docs/cuda-sm90-forward.md lists run sm80)"
                      : p == "sm75" ? "sm75 (Turing: forward, backward; f16)"
                      : p == "sm70" ? "sm70 (Volta: forward, backward; f16, head_dim <= 128)"
                                    : p);
    }
    row("cuda paths", join(paths));
  }

  fmt::print("\ncpu\n");
  row("model", cpu.model.empty() ? "unknown" : cpu.model);
  row("logical cpus", std::to_string(cpu.logical_cpus));
  row("last-level cache", cpu.last_level_cache_bytes > 0
                              ? fmt::format("{:.0f} MiB", static_cast<double>(cpu.last_level_cache_bytes) / 1048576.0)
                              : std::string("unknown"));
  row("avx2 / fma / f16c",
      fmt::format("{} / {} / {}", yes_no(cpu.avx2), yes_no(cpu.fma), yes_no(cpu.f16c)));
  row("avx512f", yes_no(cpu.avx512f));
  row("avx512 bf16", yes_no(cpu.avx512_bf16));
  {
    // Whether the AMX kernels run (src/cpu/amx.hpp): the CPU bits, the OS permission, the
    // build, and FASTATTN_CPU_AMX / FASTATTN_CPU_ISA.
    std::string use;
    try {
      const cpu::amx::AmxMode mode = cpu::amx::amx_mode();
      const cpu::Isa isa = cpu::selected_isa();
      if (mode == cpu::amx::AmxMode::emulated) {
        use = "emulated kernels (FASTATTN_CPU_AMX=emulated)";
      } else if (mode == cpu::amx::AmxMode::off) {
        use = cpu::amx::amx_mode_from_environment() ? std::string("not used (FASTATTN_CPU_AMX=off)")
                                                     : std::string("not used: ") + cpu::amx::amx_unavailable_reason();
      } else if (isa != cpu::Isa::amx) {
        use = std::string("not used (FASTATTN_CPU_ISA caps the ISA at ") + cpu::to_string(isa) + ")";
      } else {
        use = "used by the bf16 forward (head_dim a multiple of 32) and backward";
      }
    } catch (const Error& e) {
      use = e.what();
    }
    row("amx (tile/bf16)", fmt::format("{} / {}; {}", yes_no(cpu.amx_tile), yes_no(cpu.amx_bf16), use));
  }
  row("selected isa", build.cpu_isa_selected);
  row("threads", fmt::format("{} (OpenMP default)", omp_get_max_threads()));

  fmt::print("\ngpus\n");
  const GpuProbe gpus = probe_gpus();
  if (!build.cuda_compiled) row("usable", "none (built without CUDA)");
  if (!gpus.driver_found) row("driver", gpus.note);
  for (const auto& d : gpus.devices)
    row(fmt::format("device {}", d.ordinal),
        fmt::format("{} (sm_{}{}, {:.0f} GiB)", d.name, d.cc_major, d.cc_minor,
                    static_cast<double>(d.memory_bytes) / (1024.0 * 1024.0 * 1024.0)));
  if (gpus.driver_found && gpus.devices.empty()) row("devices", "none");
  for (std::size_t i = 0; i < build.cuda_device_paths.size(); ++i) {
    row(fmt::format("device {} path", i), build.cuda_device_paths[i]);
  }

  nlohmann::json j = {{"context", perf::run_context(cpu, argc, argv)}, {"threads", threads}};
  if (!args.no_peaks) {
    perf::PeakOptions options;
    options.threads = threads;
    const perf::Peaks peaks = perf::measure_peaks(cpu, options);
    fmt::print("\npeaks (measured now, {} threads)\n", peaks.threads);
    row("fp32 FMA, avx2", gflops_or(peaks.fma_avx2_gflops, "n/a on this CPU"));
    row("fp32 FMA, avx512", gflops_or(peaks.fma_avx512_gflops, "n/a on this CPU"));
    row("bf16 dot (vdpbf16ps)", gflops_or(peaks.bf16_dot_gflops, "n/a on this CPU"));
    row("memory read", peaks.mem_read_gbs ? fmt::format("{:.1f} GB/s", *peaks.mem_read_gbs)
                                          : std::string("not measured"));
    j["peaks"] = perf::to_json(peaks);
  }
  nlohmann::json gpu_list = nlohmann::json::array();
  for (const auto& d : gpus.devices)
    gpu_list.push_back({{"ordinal", d.ordinal},
                        {"name", d.name},
                        {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
                        {"memory_bytes", d.memory_bytes}});
  j["gpus"] = {{"driver_found", gpus.driver_found}, {"note", gpus.note}, {"devices", gpu_list},
               {"paths_compiled", build.cuda_paths_compiled}, {"device_paths", build.cuda_device_paths}};
  if (!args.json_path.empty()) {
    perf::write_json_file(args.json_path, j);
    fmt::print("\nwrote {}\n", args.json_path);
  }
  return kExitOk;
}

}  // namespace fastattn::cli
