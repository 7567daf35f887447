// module.cpp — fastattn._C: the C++ API over Python arrays.
//
// This layer only translates: Python arrays become TensorViews (tensor_import), option values
// become AttentionOptions, fastattn::Error becomes a Python exception (errors). Argument
// checking is the C++ library's; output allocation and keyword handling are the Python
// package's (python/fastattn/_api.py). Kernels run with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <optional>

#include "call_options.hpp"
#include "errors.hpp"
#include "cooperative.hpp"
#include "kv_cache.hpp"
#include "merge.hpp"
#include "fastattn/fastattn.hpp"
#include "tensor_import.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fastattn::python {
namespace {

// The views of a forward call, imported in argument order so errors name the first bad one.
struct ForwardCall {
  ImportedTensors imports;  // declared first: destroyed last, after the views are done
  TensorView q, k, v, out;
  std::optional<TensorView> lse;
  AttentionOptions options;

  ForwardCall(nb::handle q_, nb::handle k_, nb::handle v_, nb::handle out_, nb::handle lse_,
              nb::handle cu_q, nb::handle cu_k, const CallOptions& c) {
    q = imports.import(q_, "q", Role::data, c.u16_is_bf16);
    k = imports.import(k_, "k", Role::data, c.u16_is_bf16);
    v = imports.import(v_, "v", Role::data, c.u16_is_bf16);
    out = imports.import(out_, "out", Role::data_output, c.u16_is_bf16);
    lse = imports.import_optional(lse_, "lse", Role::lse_output, false);
    options = to_attention_options(c, imports, cu_q, cu_k);
  }
};

KernelChoice forward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                     nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, const CallOptions& c,
                     bool plan_only) {
  ForwardCall call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, c);
  if (plan_only) return plan_forward(call.q, call.k, call.v, call.out, call.lse, call.options);
  nb::gil_scoped_release release;
  return fastattn::forward(call.q, call.k, call.v, call.out, call.lse, call.options);
}

// forward() without its KernelChoice: the eager torch path (fastattn.torch) has no use for it, and
// converting it to a Python object (three strings) is a measurable part of a tiny call.
void run_forward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                 nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, const CallOptions& c) {
  ForwardCall call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, c);
  nb::gil_scoped_release release;
  fastattn::forward(call.q, call.k, call.v, call.out, call.lse, call.options);
}

KernelChoice backward(nb::handle dout, nb::handle q, nb::handle k, nb::handle v, nb::handle out,
                      nb::handle lse, nb::handle dq, nb::handle dk, nb::handle dv,
                      nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, const CallOptions& c,
                      bool plan_only) {
  ImportedTensors imports;
  const bool bf16 = c.u16_is_bf16;
  const TensorView dout_v = imports.import(dout, "dout", Role::data, bf16);
  const TensorView q_v = imports.import(q, "q", Role::data, bf16);
  const TensorView k_v = imports.import(k, "k", Role::data, bf16);
  const TensorView v_v = imports.import(v, "v", Role::data, bf16);
  const TensorView out_v = imports.import(out, "out", Role::data, bf16);
  const TensorView lse_v = imports.import(lse, "lse", Role::lse, false);
  const TensorView dq_v = imports.import(dq, "dq", Role::data_output, bf16);
  const TensorView dk_v = imports.import(dk, "dk", Role::data_output, bf16);
  const TensorView dv_v = imports.import(dv, "dv", Role::data_output, bf16);
  const AttentionOptions o = to_attention_options(c, imports, cu_seqlens_q, cu_seqlens_k);
  if (plan_only) return plan_backward(dout_v, q_v, k_v, v_v, out_v, lse_v, dq_v, dk_v, dv_v, o);
  nb::gil_scoped_release release;
  return fastattn::backward(dout_v, q_v, k_v, v_v, out_v, lse_v, dq_v, dk_v, dv_v, o);
}

// Seconds per fastattn::forward call, timed in C++ over `iterations` calls after one warm-up
// call: the baseline that Python call overhead is measured against (fastattn.bench --overhead).
// Arrays are imported once, outside the timed loop.
double time_forward(nb::handle q, nb::handle k, nb::handle v, nb::handle out, nb::handle lse,
                    nb::handle cu_seqlens_q, nb::handle cu_seqlens_k, const CallOptions& c,
                    int iterations) {
  if (iterations < 1) throw Error(ErrorCode::invalid_argument, "iterations: expected >= 1, got " + std::to_string(iterations));
  ForwardCall call(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, c);
  nb::gil_scoped_release release;
  fastattn::forward(call.q, call.k, call.v, call.out, call.lse, call.options);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    fastattn::forward(call.q, call.k, call.v, call.out, call.lse, call.options);
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iterations;
}

nb::dict build_info_dict() {
  const BuildInfo info = fastattn::build_info();
  nb::dict d;
  d["version"] = info.version;
  d["cuda_compiled"] = info.cuda_compiled;
  d["cpu_isas_compiled"] = info.cpu_isas_compiled;
  d["cpu_isa_selected"] = info.cpu_isa_selected;
  d["cuda_archs_compiled"] = info.cuda_archs_compiled;
  d["cuda_paths_compiled"] = info.cuda_paths_compiled;
  d["cuda_head_dims"] = info.cuda_head_dims;
  d["cuda_devices"] = info.cuda_devices;
  d["cuda_device_paths"] = info.cuda_device_paths;
  return d;
}

void bind_types(nb::module_& m) {
  nb::enum_<Backend>(m, "Backend")
      .value("automatic", Backend::automatic)
      .value("cpu", Backend::cpu)
      .value("reference", Backend::reference)
      .value("cuda", Backend::cuda);
  nb::enum_<MaskAlignment>(m, "MaskAlignment")
      .value("bottom_right", MaskAlignment::bottom_right)
      .value("top_left", MaskAlignment::top_left);

  nb::class_<CallOptions>(m, "CallOptions",
                          "Scalar options of a call (internal); read-only, so the Python layer can reuse them.")
      .def("__init__",
           [](CallOptions* self, bool causal, std::int64_t window_left, std::int64_t window_right,
              std::optional<float> softmax_scale, float softcap, std::int64_t max_seqlen_q,
              std::int64_t max_seqlen_k, MaskAlignment alignment, Backend backend,
              int num_threads, bool deterministic, std::uintptr_t cuda_stream, bool u16_is_bf16) {
             new (self) CallOptions{causal, window_left, window_right, softmax_scale, softcap,
                                    max_seqlen_q, max_seqlen_k, alignment, backend, num_threads,
                                    deterministic, cuda_stream, u16_is_bf16};
           },
           "causal"_a, "window_left"_a, "window_right"_a, "softmax_scale"_a.none(), "softcap"_a,
           "max_seqlen_q"_a, "max_seqlen_k"_a, "alignment"_a, "backend"_a, "num_threads"_a,
           "deterministic"_a, "cuda_stream"_a, "u16_is_bf16"_a)
      .def_ro("causal", &CallOptions::causal)
      .def_ro("window_left", &CallOptions::window_left)
      .def_ro("window_right", &CallOptions::window_right)
      .def_ro("softmax_scale", &CallOptions::softmax_scale)
      .def_ro("softcap", &CallOptions::softcap)
      .def_ro("max_seqlen_q", &CallOptions::max_seqlen_q)
      .def_ro("max_seqlen_k", &CallOptions::max_seqlen_k)
      .def_ro("alignment", &CallOptions::alignment)
      .def_ro("backend", &CallOptions::backend)
      .def_ro("num_threads", &CallOptions::num_threads)
      .def_ro("deterministic", &CallOptions::deterministic)
      .def_ro("cuda_stream", &CallOptions::cuda_stream)
      .def_ro("u16_is_bf16", &CallOptions::u16_is_bf16);

  nb::class_<KernelChoice>(m, "KernelChoice",
                           "What the dispatcher chose for a call: backend, kernel, tiles, threads.")
      .def_prop_ro("backend", [](const KernelChoice& c) { return std::string(to_string(c.backend)); },
                   "'cpu', 'reference' or 'cuda'.")
      .def_ro("kernel", &KernelChoice::kernel, "Kernel name, e.g. 'cpu.forward.avx2.f32.d64'.")
      .def_ro("isa", &KernelChoice::isa, "Instruction set, e.g. 'avx2', 'scalar', 'sm80'.")
      .def_ro("block_q", &KernelChoice::block_q, "Query rows per tile.")
      .def_ro("block_k", &KernelChoice::block_k, "Key rows per tile.")
      .def_ro("num_threads", &KernelChoice::num_threads, "CPU threads or CUDA blocks per SM.")
      .def_ro("workspace_bytes", &KernelChoice::workspace_bytes, "Scratch memory the call uses.")
      .def_ro("device_memory_bytes", &KernelChoice::device_memory_bytes,
              "CUDA: device memory the call needs (its tensors + workspace_bytes); 0 on the CPU.")
      .def_ro("reason", &KernelChoice::reason, "Why this kernel, in one sentence.")
      .def("describe", &KernelChoice::describe, "One line for logs.")
      .def("__repr__", [](const KernelChoice& c) { return "<fastattn.KernelChoice " + c.describe() + ">"; });
}

}  // namespace
}  // namespace fastattn::python

NB_MODULE(_C, m) {
  using namespace fastattn::python;
  m.doc() = "fastattn C++ bindings. Use the functions of the fastattn package, not these.";
  // torch's operator registry keeps fastattn.torch's functions (and through them this module's
  // objects, e.g. cached CallOptions) alive past nanobind's leak check at interpreter exit; the
  // report would be noise on every program that imports fastattn.torch.
  nb::set_leak_warnings(false);
  register_errors(m);
  bind_types(m);

  m.def("forward", &forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(), "cu_seqlens_q"_a.none(),
        "cu_seqlens_k"_a.none(), "options"_a, "plan_only"_a,
        "fastattn::forward (or plan_forward with plan_only) on arrays, without copies.");
  m.def("run_forward", &run_forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
        "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(), "options"_a,
        "fastattn::forward on arrays, returning None (no KernelChoice object).");
  m.def("backward", &backward, "dout"_a, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a, "dq"_a, "dk"_a,
        "dv"_a, "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(), "options"_a, "plan_only"_a,
        "fastattn::backward (or plan_backward with plan_only) on arrays, without copies.");
  m.def("time_forward", &time_forward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
        "cu_seqlens_q"_a.none(), "cu_seqlens_k"_a.none(), "options"_a, "iterations"_a,
        "Seconds per fastattn::forward call, timed inside C++ (no Python in the loop).");
  // A constant, so that `import fastattn` makes no CUDA call and reads no environment variable
  // (build_info() queries the devices and the CPU ISA choice).
  m.attr("__version__") = FASTATTN_VERSION_STRING;
  register_merge(m);     // merge_states (merge.cpp)
  register_kv_cache(m);  // attention_with_kv_cache, KVCachePlan (kv_cache.cpp)
  register_cooperative(m);  // CooperativeKVCache, CooperativeStep, cooperative_attention (cooperative.cpp)
  m.def("build_info", &build_info_dict, "Build and machine facts of the C++ library.");
  m.def("reload_environment", &fastattn::reload_environment,
        "fastattn::reload_environment: re-read the FASTATTN_* environment variables (read once per process).");
  // Memory-capped mode (fastattn/memory.hpp), process-wide.
  m.def("set_device_memory_limit", &fastattn::set_device_memory_limit, "bytes"_a.none(),
        "fastattn::set_device_memory_limit: bytes (0: no limit), None: FASTATTN_DEVICE_MEMORY_LIMIT.");
  m.def("device_memory_limit",
        [] {
          const fastattn::DeviceMemoryLimit l = fastattn::device_memory_limit();
          return nb::make_tuple(l.bytes, l.source);
        },
        "(bytes, source) of the process-wide limit in force; bytes 0: none.");
  m.def("parse_memory_size", &fastattn::parse_memory_size, "text"_a, "name"_a,
        "'16G', '32GiB', '1.5GB', '17179869184' -> bytes (ValueError naming `name` otherwise).");
}
