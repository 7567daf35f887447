// kv_cache.cpp — fastattn._C.attention_with_kv_cache and fastattn._C.KVCachePlan: arrays in,
// fastattn::attention_with_kv_cache / KVCachePlan out.
//
// Like module.cpp this layer only translates; argument checks are the C++ library's, output
// allocation and keywords the Python package's (python/fastattn/_kv_cache.py). The caches are
// imported writable when new keys are appended (a read-only array is refused by name), read-only
// otherwise. Kernels run without the GIL.
#include "kv_cache.hpp"

#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>
#include <string>

#include "call_options.hpp"
#include "fastattn/kv_cache.hpp"
#include "tensor_import.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fastattn::python {
namespace {

// The views of a KV-cache call, imported in argument order so errors name the first bad one.
// out and lse are absent (None) when only a shape is wanted (a plan's construction).
struct KVCall {
  ImportedTensors imports;  // declared first: destroyed last, after the views are done
  TensorView q, out;
  KVCache cache;
  std::optional<TensorView> lse;
  std::optional<KVAppend> append;

  KVCall(nb::handle q_, nb::handle k_cache, nb::handle v_cache, nb::handle seqlens, nb::handle block_table,
         nb::handle k_new, nb::handle v_new, nb::handle out_, nb::handle lse_, bool u16_is_bf16) {
    const bool appending = !k_new.is_none() || !v_new.is_none();
    const Role cache_role = appending ? Role::data_output : Role::data;
    q = imports.import(q_, "q", Role::data, u16_is_bf16);
    cache.k = imports.import(k_cache, "k_cache", cache_role, u16_is_bf16);
    cache.v = imports.import(v_cache, "v_cache", cache_role, u16_is_bf16);
    cache.seqlens = imports.import(seqlens, "cache_seqlens", Role::index, false);
    cache.block_table = imports.import_optional(block_table, "block_table", Role::index, false);
    if (appending) {
      if (k_new.is_none() || v_new.is_none()) {
        throw Error(ErrorCode::invalid_argument, std::string(k_new.is_none() ? "k_new" : "v_new") +
                                                     ": expected an array, since " +
                                                     (k_new.is_none() ? "v_new" : "k_new") + " is given, got None");
      }
      append = KVAppend{imports.import(k_new, "k_new", Role::data, u16_is_bf16),
                        imports.import(v_new, "v_new", Role::data, u16_is_bf16)};
    }
    if (!out_.is_none()) out = imports.import(out_, "out", Role::data_output, u16_is_bf16);
    lse = imports.import_optional(lse_, "lse", Role::lse_output, false);
  }
};

KernelChoice attention_with_kv_cache(nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle seqlens,
                                     nb::handle block_table, nb::handle k_new, nb::handle v_new, nb::handle out,
                                     nb::handle lse, const CallOptions& c) {
  KVCall call(q, k_cache, v_cache, seqlens, block_table, k_new, v_new, out, lse, c.u16_is_bf16);
  const AttentionOptions o = to_attention_options(c, call.imports, nb::none(), nb::none());
  nb::gil_scoped_release release;
  return fastattn::attention_with_kv_cache(call.q, call.cache, call.out, call.lse, call.append, o);
}

nb::dict shape_dict(const KVCacheShape& s) {
  nb::dict d;
  d["dtype"] = std::string(to_string(s.dtype));
  d["device"] = to_string(s.device);
  d["batch"] = s.batch;
  d["seqlen_q"] = s.seqlen_q;
  d["num_heads"] = s.num_heads;
  d["num_kv_heads"] = s.num_kv_heads;
  d["head_dim"] = s.head_dim;
  d["seqlen_new"] = s.seqlen_new;
  d["paged"] = s.paged;
  d["page_size"] = s.page_size;
  d["num_pages"] = s.num_pages;
  d["max_pages_per_seq"] = s.max_pages_per_seq;
  d["capacity"] = s.capacity;
  d["max_cache_len"] = s.max_cache_len;
  d["with_lse"] = s.with_lse;
  return d;
}

}  // namespace

void register_kv_cache(nb::module_& m) {
  m.def("attention_with_kv_cache", &attention_with_kv_cache, "q"_a, "k_cache"_a, "v_cache"_a, "cache_seqlens"_a,
        "block_table"_a.none(), "k_new"_a.none(), "v_new"_a.none(), "out"_a, "lse"_a.none(), "options"_a,
        "fastattn::attention_with_kv_cache on arrays, without copies.");

  nb::class_<KVCachePlan>(m, "KVCachePlan",
                          "fastattn::KVCachePlan: planned once for a call's shape, run many times (internal; use "
                          "fastattn.KVCachePlan).")
      .def(
          "__init__",
          [](KVCachePlan* self, nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle seqlens,
             nb::handle block_table, nb::handle k_new, nb::handle v_new, bool with_lse, std::int64_t max_cache_len,
             const CallOptions& c) {
            KVCall call(q, k_cache, v_cache, seqlens, block_table, k_new, v_new, nb::none(), nb::none(), c.u16_is_bf16);
            KVCacheShape shape = kv_cache_shape(call.q, call.cache, std::nullopt, call.append);
            shape.with_lse = with_lse;
            shape.max_cache_len = max_cache_len;
            const AttentionOptions o = to_attention_options(c, call.imports, nb::none(), nb::none());
            new (self) KVCachePlan(shape, o);
          },
          "q"_a, "k_cache"_a, "v_cache"_a, "cache_seqlens"_a, "block_table"_a.none(), "k_new"_a.none(),
          "v_new"_a.none(), "with_lse"_a, "max_cache_len"_a, "options"_a,
          "Plans for the shapes, dtype and device of these arrays (their values are not read).")
      .def(
          "run",
          [](const KVCachePlan& plan, nb::handle q, nb::handle k_cache, nb::handle v_cache, nb::handle seqlens,
             nb::handle block_table, nb::handle k_new, nb::handle v_new, nb::handle out, nb::handle lse,
             std::uintptr_t cuda_stream, bool u16_is_bf16) {
            // No KernelChoice back (it is plan.choice): converting its strings would be a
            // measurable part of a decode step's host time.
            KVCall call(q, k_cache, v_cache, seqlens, block_table, k_new, v_new, out, lse, u16_is_bf16);
            nb::gil_scoped_release release;
            plan.run(call.q, call.cache, call.out, call.lse, call.append, reinterpret_cast<void*>(cuda_stream));
          },
          "q"_a, "k_cache"_a, "v_cache"_a, "cache_seqlens"_a, "block_table"_a.none(), "k_new"_a.none(),
          "v_new"_a.none(), "out"_a, "lse"_a.none(), "cuda_stream"_a, "u16_is_bf16"_a,
          "KVCachePlan::run on arrays (no value checks, no allocation, no synchronisation); its KernelChoice is choice.")
      .def_prop_ro("choice", &KVCachePlan::choice, "The KernelChoice run() launches, and why.")
      .def_prop_ro("shape", [](const KVCachePlan& plan) { return shape_dict(plan.shape()); },
                   "The KVCacheShape the plan serves, as a dict.");
}

}  // namespace fastattn::python
