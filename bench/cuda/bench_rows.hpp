// bench_rows.hpp — the JSON-lines vocabulary of cuda_bench, read by compare.py: every row names
// its mode, tag, pass and shape with the same keys sdpa_anchor.py writes, so rows of the two
// programs join on (tag, pass, b, sq, sk, h, hkv, d, causal).
#pragma once

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "attention_bench.hpp"

namespace fastattn::bench {

inline nlohmann::json shape_fields(const std::string& mode, const std::string& tag,
                                   const perf::BenchShape& s, perf::Pass pass) {
  return {{"source", "fastattn"},
          {"mode", mode},
          {"tag", tag},
          {"pass", pass == perf::Pass::forward    ? "fwd"
                   : pass == perf::Pass::backward ? "bwd"
                                                  : "fwdbwd"},
          {"b", s.batch},
          {"sq", s.seqlen_q},
          {"sk", s.seqlen_k},
          {"h", s.heads},
          {"hkv", s.kv_heads},
          {"d", s.head_dim},
          {"causal", s.causal},
          {"dtype", to_string(s.dtype)}};
}

// flash-attn's benchmark convention (benchmarks/benchmark_flash_attention.py): forward
// 4 * b * h * sq * sk * d, halved for causal; backward 2.5x, forward + backward 3.5x. The
// same formula is used for every implementation, so TFLOP/s ratios equal time ratios.
inline double flash_attn_flops(const perf::BenchShape& s, perf::Pass pass) {
  double f = 4.0 * static_cast<double>(s.batch) * static_cast<double>(s.heads) *
             static_cast<double>(s.seqlen_q) * static_cast<double>(s.seqlen_k) *
             static_cast<double>(s.head_dim);
  if (s.causal) f /= 2;
  return pass == perf::Pass::forward ? f : pass == perf::Pass::backward ? 2.5 * f : 3.5 * f;
}

// One JSON object per line on stdout, flushed, so a later crash or timeout keeps every
// finished row.
inline void emit(const nlohmann::json& row) {
  std::cout << row.dump() << "\n" << std::flush;
}

}  // namespace fastattn::bench
