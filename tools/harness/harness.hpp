// harness.hpp — compare any backend with the float64 oracle (tests, `fastattn check`/`bench`).
//
// The one place where a backend is judged, in the spirit of ggml's test-backend-ops:
//   1. a Case describes a call (shapes, dtype, mask, soft-cap, varlen, layout, ...);
//   2. its tensors are filled with fresh random values (never zero), outputs are poisoned with
//      NaN before each run, and the backend runs through the public API (fastattn::forward /
//      fastattn::backward);
//   3. every output is checked to be fully written, finite (lse: -inf exactly on rows that see
//      no key, whose out rows must be exactly 0), with the padding of strided layouts untouched,
//      and every input (padding included) bitwise unchanged;
//   4. its error against reference::forward_f64 / backward_f64 must satisfy
//          error <= 2 * naive_error + floor        (for max-abs and for relative Frobenius)
//      where naive_error is the error of a plain same-precision implementation (f32 score matrix
//      and softmax from the same dtype inputs, outputs rounded to the dtype, naive.hpp), and
//          floor = eps(dtype) * |ref| + 4 * sqrt(head_dim) * eps(f32) * |terms|
//      i.e. one ulp of the output dtype plus a few f32 ulps per sqrt(D)-long dot product, taken
//      relative to the sums of absolute terms (|terms| >= |ref|: a gradient that cancels to ~0
//      still carries the rounding of its terms). |x| is ||x||_F for Frobenius, over the whole
//      tensor; max-abs is judged per row (the head_dim values of one (token, head) of out, dq,
//      dk, dv; one lse value), its error, naive error and |ref| maxima over that row (|terms|
//      over the tensor: the f32 part of the floor), so the largest values of a tensor (e.g.
//      the first rows of a causal output, which see one key) do not hide errors in its rows
//      of small values; 16-bit rows also get half an ulp of their largest term sum (kernels
//      may round P and dS to the dtype before the second product). lse counts as f32 with
//      terms max(1, |largest score|). The floor only matters where the naive error is zero or
//      tiny by luck. NaN never passes (judge.hpp).
// The backward pass is fed the reference forward's out (rounded to the dtype) and lse (f32), so
// a forward error does not hide or fake a backward one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn::harness {

// One attention call. Fields mirror AttentionOptions; sizes follow fastattn/attention.hpp.
struct Case {
  std::int64_t batch = 1;
  std::int64_t seqlen_q = 16;  // varlen: ignored (the lengths below rule)
  std::int64_t seqlen_k = 16;
  std::int64_t num_heads = 1;
  std::int64_t num_kv_heads = 1;
  std::int64_t head_dim = 64;
  DType dtype = DType::f32;

  bool causal = false;
  std::int64_t window_left = -1;  // -1: unbounded
  std::int64_t window_right = -1;
  MaskAlignment alignment = MaskAlignment::bottom_right;
  float softcap = 0.0f;       // 0: off
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim); may be negative

  // Varlen when non-empty: one length per sequence (0 and 1 allowed); batch = their count.
  std::vector<std::int32_t> seqlens_q, seqlens_k;

  bool strided = false;  // non-contiguous views with padding (and an unaligned base pointer)
  bool deterministic = false;
  int num_threads = 0;   // 0: OpenMP default
  float qk_std = 1.0f;   // standard deviation of q and k entries (larger: peakier softmax)
  std::uint64_t seed = 1;  // of the tensor values

  bool is_varlen() const { return !seqlens_q.empty(); }
  std::int64_t effective_batch() const;  // batch, or the number of varlen sequences
  float scale() const;                   // softmax_scale, or its default 1/sqrt(head_dim)

  // "b=2 sq=65 sk=63 h=8 hkv=2 d=64 dtype=bf16 mask=causal align=bottom_right ..." — every
  // field, readable, and parsed back by parse_case.
  std::string to_string() const;
};

// Inverse of Case::to_string; fields left out keep their defaults. Throws Error(invalid_argument)
// naming the bad token.
Case parse_case(const std::string& text);

// Bounds for random_case.
struct CaseLimits {
  std::int64_t max_seqlen = 160;  // of the random (not the fixed odd) lengths
  bool allow_long = false;        // allow seqlen 1000
  // Upper bound on sum over (sequence, head) of len_q * len_k * head_dim; the float64 oracle
  // costs about 10 flops per unit (forward + backward).
  std::int64_t max_work = 3'000'000;
  std::vector<DType> dtypes = {DType::f32, DType::f16, DType::bf16};
  std::vector<std::int64_t> head_dims;  // empty: a spread of multiples of 8 up to 256
  bool allow_strided = true;            // padded, unaligned views (the CUDA kernels need aligned rows)
};

// A random case from a seed: odd sizes (1, 7, 63, 65, 1000) and random ones, Sq > Sk and
// Sq < Sk, every mask and alignment, GQA ratios 1, 2, 4 and MQA, each dtype, soft-cap, varlen
// with empty and length-1 sequences, strided layouts. Same seed, same case.
Case random_case(std::uint64_t seed, const CaseLimits& limits = {});

// Error of one tensor against the float64 oracle.
struct ErrorStats {
  double max_abs = 0.0;  // max |x - ref| (inf if any x is NaN or a -inf mismatches)
  double rel_fro = 0.0;  // ||x - ref||_F / ||ref||_F (absolute when ||ref|| = 0)
};

struct TensorCheck {
  std::string name;       // out, lse, dq, dk, dv
  ErrorStats backend;     // the backend under test vs float64
  ErrorStats naive;       // the naive same-precision implementation vs float64
  ErrorStats bound;       // 2 * naive + floor
  // max_abs of backend / naive / bound are those of this row (judge.hpp): the one with the
  // largest error / bound; -1 for an empty tensor.
  std::int64_t worst_row = -1;
  std::int64_t unwritten = 0;        // elements still holding the NaN poison
  std::int64_t non_finite = 0;       // other NaN / inf (lse: inf other than -inf on empty rows)
  std::int64_t padding_clobbered = 0;  // strided layouts: writes outside the view
  std::int64_t masked_rows_wrong = 0;  // rows that see no key: out != 0 or lse != -inf
  bool pass = false;
  std::string to_string() const;  // one line
};

struct CheckOptions {
  bool forward = true;
  bool backward = true;
};

struct CheckReport {
  Case c;
  Backend backend = Backend::automatic;
  KernelChoice forward_choice, backward_choice;
  std::vector<TensorCheck> tensors;
  std::string error;  // what the backend threw, if it did
  bool pass = false;
  std::string to_string() const;  // the case and one line per tensor
};

// Run `backend` on `c` through the public API and judge it (see the top of this file).
CheckReport check_case(const Case& c, Backend backend, const CheckOptions& options = {});

// Timing of one case through the public API.
struct PerfOptions {
  int warmup = 2;
  int repeats = 10;
  bool backward = false;  // time backward (its forward runs once, untimed)
};
struct PerfReport {
  Case c;
  KernelChoice choice;
  double median_seconds = 0.0;
  double min_seconds = 0.0;
  double flops = 0.0;   // attention_flops of the case
  double gflops = 0.0;  // flops / median_seconds / 1e9
  std::string to_string() const;
};
PerfReport measure(const Case& c, Backend backend, const PerfOptions& options = {});

// FLOPs of the two matrix products: 4 * head_dim per visible (query, key) pair, summed over
// sequences and heads (4 * Sq * Sk * D per (batch, head) unmasked, about half that for causal:
// the flash-attn convention). Backward: 2.5x forward.
double attention_flops(const Case& c, bool backward);

}  // namespace fastattn::harness
