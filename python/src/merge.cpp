// merge.cpp — fastattn._C.merge_states: arrays in, fastattn::merge_states (or its plan) out.
//
// Like module.cpp, this layer only translates; argument checks are the C++ library's, output
// allocation the Python package's (python/fastattn/_merge.py). The kernel runs without the GIL.
#include "merge.hpp"

#include <nanobind/stl/string.h>

#include <cstdint>

#include "fastattn/merge.hpp"
#include "tensor_import.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fastattn::python {
namespace {

KernelChoice merge_states(nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b, nb::handle out,
                          nb::handle lse, Backend backend, int num_threads, std::uintptr_t cuda_stream,
                          bool u16_is_bf16, bool plan_only) {
  ImportedTensors imports;  // declared first: destroyed last, after the views are done
  const TensorView out_a_v = imports.import(out_a, "out_a", Role::data, u16_is_bf16);
  const TensorView lse_a_v = imports.import(lse_a, "lse_a", Role::lse, false);
  const TensorView out_b_v = imports.import(out_b, "out_b", Role::data, u16_is_bf16);
  const TensorView lse_b_v = imports.import(lse_b, "lse_b", Role::lse, false);
  const TensorView out_v = imports.import(out, "out", Role::data_output, u16_is_bf16);
  const std::optional<TensorView> lse_v = imports.import_optional(lse, "lse", Role::lse_output, false);
  MergeOptions o;
  o.backend = backend;
  o.num_threads = num_threads;
  o.cuda_stream = reinterpret_cast<void*>(cuda_stream);
  if (plan_only) return plan_merge_states(out_a_v, lse_a_v, out_b_v, lse_b_v, out_v, lse_v, o);
  nb::gil_scoped_release release;
  return fastattn::merge_states(out_a_v, lse_a_v, out_b_v, lse_b_v, out_v, lse_v, o);
}

}  // namespace

void register_merge(nb::module_& m) {
  m.def("merge_states", &merge_states, "out_a"_a, "lse_a"_a, "out_b"_a, "lse_b"_a, "out"_a, "lse"_a.none(),
        "backend"_a, "num_threads"_a, "cuda_stream"_a, "u16_is_bf16"_a, "plan_only"_a,
        "fastattn::merge_states (or plan_merge_states with plan_only) on arrays, without copies.");
}

}  // namespace fastattn::python
