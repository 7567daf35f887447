// fastattn/merge.hpp — merge two partial attention results over disjoint key sets.
#pragma once

#include <optional>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

// Options of a merge: where it runs. (A merge has no mask, scale or scratch.)
struct MergeOptions {
  Backend backend = Backend::automatic;  // automatic: the tensors' device; reference: float64 math on the CPU
  int num_threads = 0;                   // CPU threads; 0: OpenMP's default
  void* cuda_stream = nullptr;           // cudaStream_t; nullptr: the default stream
};

// Attention over the union of two disjoint key sets A and B, from each set's normalised
// output and log-sum-exp (forward() with lse, run on the keys of A and on the keys of B):
//   lse = log(exp(lse_a) + exp(lse_b))              computed as m + log(exp(lse_a - m) + exp(lse_b - m)),
//                                                   m = max(lse_a, lse_b)
//   out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)
// per (batch, token, head) row, in fp32, rounded once to out's dtype. Exact: merging the two
// halves of a key split gives forward() over all keys, up to rounding. Merges chain (merge
// (A, B) with C), which is how cascade / shared-prefix attention, split KV across devices and
// ring attention combine their partial results.
//
//   out_a, out_b, out: [batch, seqlen_q, num_heads, head_dim]  (varlen: [total_q, num_heads, head_dim])
//                      one dtype (f32, f16 or bf16), any strides with head_dim contiguous
//   lse_a, lse_b, lse: f32 [batch, num_heads, seqlen_q]         (varlen: [num_heads, total_q])
//   lse is optional (the last merge of a chain rarely needs it).
// Rows with no keys: lse -inf (forward() writes that, with out 0). A side with lse = -inf
// contributes nothing (its out is not read into the sum, so it may hold anything); both -inf
// give out = 0 and lse = -inf, never NaN. NaN or +inf in lse_a or lse_b (forward() never writes
// either: they mean an upstream bug or overflow) give NaN in that row's out and lse, so the
// error stays visible instead of becoming a plausible number.
//
// In place: out may be the same view as out_a or out_b (same data pointer, strides and dtype),
// and lse the same view as lse_a or lse_b, e.g. merge_states(acc, acc_lse, part, part_lse, acc,
// acc_lse) to accumulate into acc. Any other overlap between an output and an input, or between
// out and lse, is an error.
//
// All tensors on one device; CPU tensors run on the CPU (OpenMP over rows), CUDA tensors on
// their GPU on options.cuda_stream (asynchronously, like forward()). Throws fastattn::Error
// naming the argument; on error nothing is written.
KernelChoice merge_states(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                          const TensorView& lse_b, const TensorView& out,
                          const std::optional<TensorView>& lse, const MergeOptions& options = {});

// Validate the arguments and report the kernel merge_states would use, without running it.
KernelChoice plan_merge_states(const TensorView& out_a, const TensorView& lse_a,
                               const TensorView& out_b, const TensorView& lse_b,
                               const TensorView& out, const std::optional<TensorView>& lse,
                               const MergeOptions& options = {});

}  // namespace fastattn
