// call_options.hpp — the scalar options of a call as the Python layer passes them (one
// CallOptions object, cached there per option set), and their AttentionOptions; shared by the
// bindings of module.cpp and kv_cache.cpp.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <optional>

#include "fastattn/options.hpp"
#include "tensor_import.hpp"

namespace fastattn::python {

// The scalar options of a call, built once per call by the Python layer. cu_seqlens are
// tensors and travel with the other arrays.
struct CallOptions {
  bool causal = false;
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  std::optional<float> softmax_scale;
  float softcap = 0.0f;
  std::int64_t max_seqlen_q = 0;
  std::int64_t max_seqlen_k = 0;
  MaskAlignment alignment = MaskAlignment::bottom_right;
  Backend backend = Backend::automatic;
  int num_threads = 0;
  bool deterministic = false;
  std::uintptr_t cuda_stream = 0;  // cudaStream_t as an integer; 0: the default stream
  bool u16_is_bf16 = false;        // uint16 arrays hold bfloat16 (NumPy + ml_dtypes)
};

inline AttentionOptions to_attention_options(const CallOptions& c, ImportedTensors& imports,
                                             nb::handle cu_seqlens_q, nb::handle cu_seqlens_k) {
  AttentionOptions o;
  o.softmax_scale = c.softmax_scale;
  o.causal = c.causal;
  o.window_left = c.window_left;
  o.window_right = c.window_right;
  o.alignment = c.alignment;
  o.softcap = c.softcap;
  o.cu_seqlens_q = imports.import_optional(cu_seqlens_q, "cu_seqlens_q", Role::index, false);
  o.cu_seqlens_k = imports.import_optional(cu_seqlens_k, "cu_seqlens_k", Role::index, false);
  o.max_seqlen_q = c.max_seqlen_q;
  o.max_seqlen_k = c.max_seqlen_k;
  o.deterministic = c.deterministic;
  o.backend = c.backend;
  o.num_threads = c.num_threads;
  o.cuda_stream = reinterpret_cast<void*>(c.cuda_stream);
  return o;
}

}  // namespace fastattn::python
