// partials.cpp — the CPU side of the step's merge: partial (out, lse) results accumulated into
// an f32 accumulator with merge_states' formula (fastattn/merge.hpp), then rounded once.
// merge_states itself takes one dtype for all its outputs; keeping the running sum in f32 is
// what keeps a chain of many streamed chunks from rounding to bf16 at every link.
#include <cmath>
#include <limits>

#include "common/dtype.hpp"
#include "cooperative/cooperative_internal.hpp"

namespace fastattn::coop {

void accumulate_partial_cpu(float* acc, float* acc_lse, const void* out, DType dtype, const float* lse,
                            std::int64_t seqlen_q, std::int64_t num_heads, std::int64_t head_dim) {
  for (std::int64_t t = 0; t < seqlen_q; ++t) {
    for (std::int64_t h = 0; h < num_heads; ++h) {
      const std::int64_t row = t * num_heads + h;  // out / acc row
      const std::int64_t lrow = h * seqlen_q + t;  // lse row
      const float la = acc_lse[lrow];
      const float lb = lse[lrow];
      float* a = acc + row * head_dim;
      if (std::isnan(la) || std::isnan(lb) || la == INFINITY || lb == INFINITY) {
        for (std::int64_t d = 0; d < head_dim; ++d) a[d] = NAN;
        acc_lse[lrow] = NAN;
        continue;
      }
      if (lb == -INFINITY) continue;  // nothing to add
      const float m = std::fmax(la, lb);
      const float merged = m + std::log(std::exp(la - m) + std::exp(lb - m));
      const float wa = la == -INFINITY ? 0.0f : std::exp(la - merged);
      const float wb = std::exp(lb - merged);
      for (std::int64_t d = 0; d < head_dim; ++d) {
        const float b = static_cast<float>(load_element(out, dtype, row * head_dim + d));
        a[d] = (la == -INFINITY ? 0.0f : a[d] * wa) + b * wb;
      }
      acc_lse[lrow] = merged;
    }
  }
}

void finish_partials_cpu(const float* acc, const float* acc_lse, const TensorView& out, const TensorView* lse,
                         std::int64_t seqlen_q, std::int64_t num_heads, std::int64_t head_dim) {
  for (std::int64_t t = 0; t < seqlen_q; ++t) {
    for (std::int64_t h = 0; h < num_heads; ++h) {
      const float* a = acc + (t * num_heads + h) * head_dim;
      const std::int64_t base = t * out.stride[1] + h * out.stride[2];
      const bool empty = acc_lse[h * seqlen_q + t] == -INFINITY;
      for (std::int64_t d = 0; d < head_dim; ++d) store_element(out.data, out.dtype, base + d, empty ? 0.0 : a[d]);
      if (lse != nullptr) {
        static_cast<float*>(lse->data)[h * lse->stride[1] + t * lse->stride[2]] = acc_lse[h * seqlen_q + t];
      }
    }
  }
}

}  // namespace fastattn::coop
