// cooperative.cpp — fastattn._C.CooperativeKVCache, CooperativeStep and cooperative_attention:
// arrays in, fastattn/cooperative.hpp out (docs/long-context.md). Like kv_cache.cpp this layer
// only translates: argument checks are the C++ library's, output allocation and keywords the
// Python package's (python/fastattn/_cooperative.py). Appends and steps run without the GIL.
#include "cooperative.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "call_options.hpp"
#include "fastattn/cooperative.hpp"
#include "tensor_import.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace fastattn::python {
namespace {

DType dtype_named(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f16" || name == "float16") return DType::f16;
  if (name == "f32" || name == "float32") return DType::f32;
  throw Error(ErrorCode::invalid_argument, "dtype: expected bf16, f16 or f32, got " + name);
}

SplitPolicy policy_named(const std::string& name) {
  if (name == "auto") return SplitPolicy::automatic;
  if (name == "stream_all") return SplitPolicy::stream_all;
  if (name == "cpu_all") return SplitPolicy::cpu_all;
  if (name == "stream_fraction") return SplitPolicy::stream_fraction;
  throw Error(ErrorCode::invalid_argument, "policy: expected auto, stream_all, cpu_all or stream_fraction, got " + name);
}

PageTier tier_named(const std::string& name) {
  if (name == "device") return PageTier::device;
  if (name == "host") return PageTier::host;
  throw Error(ErrorCode::invalid_argument, "tier: expected device or host, got " + name);
}

// rates: "" measures them (once per process); else FASTATTN_COOP_RATES' text.
CooperativeOptions step_options(const CallOptions& c, ImportedTensors& imports, const std::string& policy,
                                double stream_fraction, unsigned parts, const std::string& rates) {
  CooperativeOptions o;
  o.attention = to_attention_options(c, imports, nb::none(), nb::none());
  o.policy = policy_named(policy);
  o.stream_fraction = stream_fraction;
  o.cpu_threads = c.num_threads;
  o.parts = parts;
  if (!rates.empty()) o.rates = parse_cooperative_rates(rates);
  return o;
}

nb::dict split_dict(const CooperativeSplit& s) {
  nb::dict d;
  d["device_pages"] = s.device_pages;
  d["streamed_pages"] = s.streamed_pages;
  d["cpu_pages"] = s.cpu_pages;
  d["chunk_pages"] = s.chunk_pages;
  d["device_s"] = s.device_s;
  d["streamed_s"] = s.streamed_s;
  d["cpu_s"] = s.cpu_s;
  d["step_s"] = s.step_s;
  d["choice"] = s.choice;
  return d;
}

// The rates under the keys of the `rates` argument (FASTATTN_COOP_RATES' names), and source.
nb::dict rates_dict(const CooperativeRates& r) {
  nb::dict d;
  d["pcie"] = r.pcie_h2d;
  d["host"] = r.host_read_during_dma;
  d["cpu"] = r.cpu_attention;
  d["hbm"] = r.gpu_hbm;
  d["flops"] = r.gpu_attention_flops;
  d["cpuflops"] = r.cpu_attention_flops;
  d["source"] = r.source;
  return d;
}

// A step's arrays, imported in argument order so errors name the first bad one.
struct StepCall {
  ImportedTensors imports;  // declared first: destroyed last
  TensorView q, out;
  std::optional<TensorView> lse;
  std::optional<CooperativeNewKV> new_kv;

  StepCall(nb::handle q_, nb::handle out_, nb::handle lse_, nb::handle k_new, nb::handle v_new, bool u16_is_bf16) {
    q = imports.import(q_, "q", Role::data, u16_is_bf16);
    if (!k_new.is_none() || !v_new.is_none()) {
      if (k_new.is_none() || v_new.is_none()) {
        throw Error(ErrorCode::invalid_argument, std::string(k_new.is_none() ? "k_new" : "v_new") +
                                                     ": expected an array, since " +
                                                     (k_new.is_none() ? "v_new" : "k_new") + " is given, got None");
      }
      new_kv = CooperativeNewKV{imports.import(k_new, "k_new", Role::data, u16_is_bf16),
                                imports.import(v_new, "v_new", Role::data, u16_is_bf16)};
    }
    out = imports.import(out_, "out", Role::data_output, u16_is_bf16);
    lse = imports.import_optional(lse_, "lse", Role::lse_output, false);
  }
};

}  // namespace

void register_cooperative(nb::module_& m) {
  nb::class_<CooperativeKVCache>(m, "CooperativeKVCache",
                                 "fastattn::CooperativeKVCache: pages in device memory up to a budget, the rest in "
                                 "pinned host memory (internal; use fastattn.CooperativeKVCache).")
      .def(
          "__init__",
          [](CooperativeKVCache* self, const std::string& dtype, std::int64_t num_kv_heads, std::int64_t head_dim,
             std::int64_t page_size, std::int64_t max_sequences, std::size_t device_budget_bytes,
             std::int64_t staging_pages, std::int64_t host_pages, int device) {
            CooperativeCacheConfig c;
            c.dtype = dtype_named(dtype);
            c.num_kv_heads = num_kv_heads;
            c.head_dim = head_dim;
            c.page_size = page_size;
            c.max_sequences = max_sequences;
            c.device_budget_bytes = device_budget_bytes;
            c.staging_pages = staging_pages;
            c.host_pages = host_pages;
            c.device = device < 0 ? Device::cpu() : Device::cuda(device);
            new (self) CooperativeKVCache(c);
          },
          "dtype"_a, "num_kv_heads"_a, "head_dim"_a, "page_size"_a, "max_sequences"_a, "device_budget_bytes"_a,
          "staging_pages"_a, "host_pages"_a, "device"_a, "device -1: the CPU emulation; i >= 0: CUDA device i.")
      .def(
          "append",
          [](CooperativeKVCache& cache, std::int64_t seq, nb::handle k, nb::handle v, bool u16_is_bf16) {
            ImportedTensors imports;
            const TensorView kv = imports.import(k, "k", Role::data, u16_is_bf16);
            const TensorView vv = imports.import(v, "v", Role::data, u16_is_bf16);
            nb::gil_scoped_release release;
            cache.append(seq, kv, vv);
          },
          "seq"_a, "k"_a, "v"_a, "u16_is_bf16"_a)
      .def("set_pages", &CooperativeKVCache::set_pages, "seq"_a, "pages"_a, "length"_a)
      .def("check_room", &CooperativeKVCache::check_room, "seq"_a, "tokens"_a, "name"_a)
      .def("release", &CooperativeKVCache::release, "seq"_a)
      .def("length", &CooperativeKVCache::length, "seq"_a)
      .def("pages", [](const CooperativeKVCache& c, std::int64_t seq) { return c.pages(seq); }, "seq"_a)
      .def("tier", [](const CooperativeKVCache& c, std::int32_t page) { return std::string(to_string(c.tier(page))); },
           "page"_a)
      .def("free_pages", [](const CooperativeKVCache& c, const std::string& tier) { return c.free_pages(tier_named(tier)); },
           "tier"_a)
      .def_prop_ro("device_pages", &CooperativeKVCache::device_pages)
      .def_prop_ro("host_pages", &CooperativeKVCache::host_pages)
      .def_prop_ro("page_bytes", &CooperativeKVCache::page_bytes)
      .def_prop_ro("staging_bytes", &CooperativeKVCache::staging_bytes)
      .def_prop_ro("device_bytes", &CooperativeKVCache::device_bytes);

  nb::class_<CooperativeStep>(m, "CooperativeStep",
                              "fastattn::CooperativeStep: planned once for q's shape and a cache, run many times "
                              "(internal; use fastattn.CooperativeStep).")
      .def(
          "__init__",
          [](CooperativeStep* self, nb::handle q, const CooperativeKVCache& cache, const CallOptions& c,
             const std::string& policy, double stream_fraction, unsigned parts, const std::string& rates,
             bool refine_rates) {
            ImportedTensors imports;
            const TensorView qv = imports.import(q, "q", Role::data, c.u16_is_bf16);
            CooperativeOptions o = step_options(c, imports, policy, stream_fraction, parts, rates);
            o.refine_rates = refine_rates;
            new (self) CooperativeStep(qv, cache, o);
          },
          "q"_a, "cache"_a, "options"_a, "policy"_a, "stream_fraction"_a, "parts"_a, "rates"_a, "refine_rates"_a,
          nb::keep_alive<1, 3>(), "Plans for q's shape and the cache (which the step keeps alive).")
      .def(
          "run",
          [](CooperativeStep& step, nb::handle q, std::int64_t seq, nb::handle out, nb::handle lse, nb::handle k_new,
             nb::handle v_new, bool u16_is_bf16) {
            StepCall call(q, out, lse, k_new, v_new, u16_is_bf16);
            nb::gil_scoped_release release;
            return step.run(call.q, seq, call.out, call.lse, call.new_kv);
          },
          "q"_a, "seq"_a, "out"_a, "lse"_a.none(), "k_new"_a.none(), "v_new"_a.none(), "u16_is_bf16"_a)
      .def("plan", [](const CooperativeStep& step, std::int64_t seq) { return split_dict(step.plan(seq)); }, "seq"_a,
           "The split run() would use for seq now, as a dict.")
      .def(
          "last_times",
          [](const CooperativeStep& step) {
            const CooperativeStep::Times t = step.last_times();
            nb::dict d;
            d["gpu_s"] = t.gpu_s;
            d["cpu_s"] = t.cpu_s;
            d["step_s"] = t.step_s;
            return d;
          },
          "What the last run took (seconds), as a dict.")
      .def(
          "rates",
          [](const CooperativeStep& step) { return rates_dict(step.rates()); },
          "The rates of the next run's split, as a dict (the keys of the rates argument, and source).");

  m.def(
      "cooperative_attention",
      [](nb::handle q, const CooperativeKVCache& cache, std::int64_t seq, nb::handle out, nb::handle lse,
         nb::handle k_new, nb::handle v_new, const CallOptions& c, const std::string& policy, double stream_fraction,
         unsigned parts, const std::string& rates) {
        StepCall call(q, out, lse, k_new, v_new, c.u16_is_bf16);
        const CooperativeOptions o = step_options(c, call.imports, policy, stream_fraction, parts, rates);
        nb::gil_scoped_release release;
        return fastattn::cooperative_attention(call.q, cache, seq, call.out, call.lse, call.new_kv, o);
      },
      "q"_a, "cache"_a, "seq"_a, "out"_a, "lse"_a.none(), "k_new"_a.none(), "v_new"_a.none(), "options"_a,
      "policy"_a, "stream_fraction"_a, "parts"_a, "rates"_a, "fastattn::cooperative_attention on arrays.");
}

}  // namespace fastattn::python
