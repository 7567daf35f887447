// determinism.cpp — bitwise repeatability and cost of AttentionOptions::deterministic on CUDA.
#include "determinism.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bench_rows.hpp"
#include "device_array.hpp"
#include "device_tensors.hpp"

namespace fastattn::bench {

namespace {

using Bytes = std::vector<unsigned char>;
using Gradients = std::array<Bytes, 3>;  // dq, dk, dv

float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Largest |a - b| over two bf16 buffers (NaN if either holds a NaN).
double max_abs_diff_bf16(const Bytes& a, const Bytes& b) {
  double worst = 0;
  for (std::size_t i = 0; i + 1 < a.size() && i + 1 < b.size(); i += 2) {
    std::uint16_t x, y;
    std::memcpy(&x, &a[i], 2);
    std::memcpy(&y, &b[i], 2);
    const double d = std::fabs(static_cast<double>(bf16_to_float(x)) - bf16_to_float(y));
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

struct Case {
  perf::BenchShape shape;
  const char* tag;
  bool varlen = false;  // the padded tensors read as one varlen batch of `batch` equal sequences
};

std::vector<Case> cases(DeterminismShapes shapes) {
  auto make = [](std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t hkv, std::int64_t d,
                 bool causal) {
    perf::BenchShape x;
    x.batch = b;
    x.seqlen_q = x.seqlen_k = s;
    x.heads = h;
    x.kv_heads = hkv;
    x.head_dim = d;
    x.dtype = DType::bf16;
    x.causal = causal;
    return x;
  };
  if (shapes == DeterminismShapes::pairs || shapes == DeterminismShapes::pairs_varlen) {
    const bool varlen = shapes == DeterminismShapes::pairs_varlen;
    const char* tag = varlen ? "determinism_pairs_varlen" : "determinism_pairs";
    std::vector<Case> out;
    for (std::int64_t b : {1, 2, 4, 8}) {
      out.push_back({make(b, 4096, 32, 32, 64, false), tag, varlen});
      out.push_back({make(b, 4096, 16, 16, 128, false), tag, varlen});
    }
    // Varlen causal too: its non-deterministic default takes the causal calls' groups.
    if (varlen) {
      for (std::int64_t b : {2, 8}) {
        out.push_back({make(b, 4096, 32, 32, 64, true), tag, varlen});
        out.push_back({make(b, 4096, 16, 16, 128, true), tag, varlen});
      }
    }
    return out;
  }
  // MHA at both head dims, causal and not, and GQA (dK/dV summed over a group of 8 heads,
  // where an atomic reduction would show first).
  return {{make(2, 4096, 16, 16, 128, false), "determinism"},
          {make(2, 4096, 16, 16, 128, true), "determinism"},
          {make(2, 4096, 32, 32, 64, false), "determinism"},
          {make(1, 4096, 32, 4, 128, true), "determinism_gqa"}};
}

}  // namespace

DeterminismShapes parse_determinism_shapes(const std::string& text) {
  if (text == "bar") return DeterminismShapes::bar;
  if (text == "pairs") return DeterminismShapes::pairs;
  if (text == "pairs_varlen") return DeterminismShapes::pairs_varlen;
  throw Error(ErrorCode::invalid_argument,
              "cuda_bench: --det-shapes expected bar, pairs or pairs_varlen, got '" + text + "'");
}

void run_determinism_mode(const perf::cuda::EventTimingOptions& timing, int runs, DeterminismShapes shapes) {
  for (const Case& c : cases(shapes)) {
    nlohmann::json row = shape_fields("determinism", c.tag, c.shape, perf::Pass::backward);
    try {
      perf::cuda::DeviceAttentionTensors t(c.shape, true);
      AttentionOptions options;
      options.backend = Backend::cuda;
      options.causal = c.shape.causal;
      // Varlen: [b, s, h, d] read as [b * s, h, d] (the same bytes) with cu_seqlens 0, s, 2s, ...;
      // lse becomes [h, b * s] (its buffer has that many floats).
      DeviceArray cu_seqlens(c.varlen ? static_cast<std::size_t>(c.shape.batch + 1) * 4 : 0);
      if (c.varlen) {
        if (c.shape.seqlen_q != c.shape.seqlen_k) {  // one cu_seqlens for q and k below
          throw Error(ErrorCode::invalid_argument, "determinism: varlen shapes need seqlen_q == seqlen_k");
        }
        const std::int64_t b = c.shape.batch, s = c.shape.seqlen_q, h = c.shape.heads, hkv = c.shape.kv_heads,
                           d = c.shape.head_dim;
        std::vector<std::int32_t> offsets(static_cast<std::size_t>(b + 1));
        for (std::int64_t i = 0; i <= b; ++i) offsets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i * s);
        perf::cuda::check(cudaMemcpy(cu_seqlens.data, offsets.data(), cu_seqlens.bytes, cudaMemcpyHostToDevice),
                          "cudaMemcpy (cu_seqlens)");
        auto tokens = [&](TensorView& x, std::int64_t heads) {
          x = make_tensor(x.data, x.dtype, {b * s, heads, d}, x.device);
        };
        for (TensorView* x : {&t.q, &t.out, &t.dout, &t.dq}) tokens(*x, h);
        for (TensorView* x : {&t.k, &t.v, &t.dk, &t.dv}) tokens(*x, hkv);
        t.lse = make_tensor(t.lse.data, DType::f32, {h, b * s}, t.lse.device);
        options.cu_seqlens_q = options.cu_seqlens_k = make_tensor(cu_seqlens.data, DType::i32, {b + 1}, t.q.device);
        options.max_seqlen_q = options.max_seqlen_k = s;
      }
      fastattn::forward(t.q, t.k, t.v, t.out, t.lse, options);
      auto backward_once = [&](bool deterministic) {
        options.deterministic = deterministic;
        return fastattn::backward(t.dout, t.q, t.k, t.v, t.out, t.lse, t.dq, t.dk, t.dv, options);
      };
      auto gradients = [&](bool deterministic) {
        // Poison the outputs first, so a kernel that skips a write cannot pass as repeatable.
        for (const TensorView* g : {&t.dq, &t.dk, &t.dv})
          perf::cuda::check(cudaMemset(g->data, 0xff, static_cast<std::size_t>(g->numel()) * 2),
                            "cudaMemset");
        backward_once(deterministic);
        perf::cuda::check(cudaDeviceSynchronize(), "backward");
        return Gradients{perf::cuda::download(t.dq), perf::cuda::download(t.dk),
                         perf::cuda::download(t.dv)};
      };
      const KernelChoice det_choice = backward_once(true);
      const Gradients det1 = gradients(true);
      // Runs 2..runs against run 1, one at a time (a 4k row's gradients are ~100 MB).
      std::array<bool, 3> same_all{true, true, true};
      for (int run = 1; run < std::max(runs, 2); ++run) {
        const Gradients later = gradients(true);
        for (std::size_t i = 0; i < 3; ++i) same_all[i] = same_all[i] && later[i] == det1[i];
      }
      const Gradients def1 = gradients(false), def2 = gradients(false);
      const char* names[3] = {"dq", "dk", "dv"};
      bool equal = true;
      row["runs"] = std::max(runs, 2);
      for (int i = 0; i < 3; ++i) {
        const bool same = same_all[static_cast<std::size_t>(i)];
        row[std::string("equal_") + names[i]] = same;
        equal = equal && same;
        row[std::string("max_abs_diff_vs_default_") + names[i]] =
            max_abs_diff_bf16(det1[static_cast<std::size_t>(i)], def1[static_cast<std::size_t>(i)]);
      }
      row["equal"] = equal;
      row["default_equal"] = def1 == def2;  // informative: the default need not be repeatable

      const auto stream = static_cast<cudaStream_t>(options.cuda_stream);
      const perf::cuda::EventTiming det =
          perf::cuda::time_with_events([&] { backward_once(true); }, stream, timing);
      const perf::cuda::EventTiming def =
          perf::cuda::time_with_events([&] { backward_once(false); }, stream, timing);
      const double flops = flash_attn_flops(c.shape, perf::Pass::backward);
      row["deterministic_ms"] = det.median_ms;
      row["default_ms"] = def.median_ms;
      row["deterministic_tflops"] = flops / det.median_ms / 1e9;
      row["default_tflops"] = flops / def.median_ms / 1e9;
      row["slowdown"] = det.median_ms / def.median_ms;
      row["repeats"] = std::min(det.repeats, def.repeats);
      row["kernel"] = det_choice.kernel;
    } catch (const Error& e) {
      row["error"] = e.what();
      row["error_code"] = to_string(e.code());
      emit(row);
      if (e.code() == ErrorCode::device_error) return;  // the context may be unusable now
      continue;
    }
    emit(row);
  }
}

}  // namespace fastattn::bench
