// tensors.hpp — host tensors of a Case: random inputs, poisoned outputs, guarded padding.
//
// Internal to the harness and the tests (the CLI needs only harness.hpp). A HostTensor owns
// memory for one TensorView, possibly strided with gaps; everything outside the view (gaps, a
// few elements before the base pointer and after the last element) holds a guard NaN pattern so
// that a read that uses it shows up as NaN and a write into it is counted.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/dtype.hpp"
#include "common/problem.hpp"
#include "fastattn/attention.hpp"
#include "harness/harness.hpp"

namespace fastattn::harness {

// Bit patterns (16- or 32-bit by dtype): quiet NaNs with recognisable payloads.
std::uint32_t poison_bits(DType dtype);  // output elements before a run
std::uint32_t guard_bits(DType dtype);   // memory outside a view

// Element access by dtype: fastattn::load_element / store_element (common/dtype.hpp).

class HostTensor {
 public:
  HostTensor() = default;
  // Contiguous and 64-byte aligned.
  HostTensor(DType dtype, const std::vector<std::int64_t>& shape);
  // Strided: data starts `lead` elements into the allocation (so it may be unaligned) and
  // `tail` guard elements follow the last element of the view.
  HostTensor(DType dtype, const std::vector<std::int64_t>& shape,
             const std::vector<std::int64_t>& strides, std::int64_t lead, std::int64_t tail);
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  std::int64_t numel() const { return static_cast<std::int64_t>(offsets_.size()); }

  // Elements in logical (row-major over the shape) order.
  double get(std::int64_t i) const;
  void set(std::int64_t i, double value);  // rounded to the dtype
  std::uint32_t bits(std::int64_t i) const;
  std::vector<double> values() const;

  void fill_view_bits(std::uint32_t pattern);  // every element of the view
  std::int64_t count_view_bits(std::uint32_t pattern) const;
  // Guard elements (outside the view) whose bits are no longer guard_bits(dtype).
  std::int64_t count_guard_clobbered() const;
  // Raw bytes of the whole allocation, to detect writes to inputs.
  std::vector<std::uint8_t> snapshot() const;
  // The whole allocation (guards included), for device mirrors (device_mirror.hpp).
  std::uint8_t* storage() { return start(); }
  std::size_t storage_bytes() const;

 private:
  void allocate(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& strides,
                std::int64_t lead, std::int64_t tail, std::size_t alignment);
  std::uint8_t* start() { return bytes_.data() + align_pad_; }
  const std::uint8_t* start() const { return bytes_.data() + align_pad_; }
  std::uint32_t storage_bits(std::int64_t storage_index) const;

  TensorView view_;
  std::vector<std::uint8_t> bytes_;  // allocation; the usable part begins at align_pad_
  std::size_t align_pad_ = 0;
  std::int64_t lead_ = 0;            // elements before view_.data
  std::int64_t storage_elems_ = 0;   // lead + extent + tail
  std::vector<std::int64_t> offsets_;   // element offset from view_.data, logical order
  std::vector<std::uint8_t> in_view_;   // per storage element: 1 if part of the view
};

// The tensors of one Case, filled from c.seed. Outputs (out, lse, dq, dk, dv) start poisoned.
class CaseData {
 public:
  explicit CaseData(const Case& c);

  const Case& spec() const { return c_; }
  std::int64_t batch() const { return batch_; }
  std::int64_t total_q() const { return total_q_; }
  std::int64_t total_k() const { return total_k_; }

  // AttentionOptions for this case (always with an explicit softmax_scale = c.scale()).
  AttentionOptions options(Backend backend) const;
  // The problem validate_forward/validate_backward build from these tensors, for the float64
  // oracle and the naive implementation (which are not reached through the public API).
  AttentionProblem problem() const;

  // Poison the outputs, then call fastattn::forward / fastattn::backward. backward reads out
  // and lse as they are (see set_forward_outputs).
  KernelChoice run_forward(Backend backend);
  KernelChoice run_backward(Backend backend);

  // Store forward results given in the reference layout (out [total_q, H, D], lse [H, total_q])
  // into out (rounded to the dtype) and lse (f32).
  void set_forward_outputs(const std::vector<double>& out, const std::vector<double>& lse);
  // lse in the reference layout [H, total_q].
  std::vector<double> lse_values() const;

  HostTensor q, k, v, dout;    // inputs
  HostTensor out, lse;         // forward outputs (backward inputs)
  HostTensor dq, dk, dv;       // backward outputs
  HostTensor cu_seqlens_q, cu_seqlens_k;  // varlen only

 private:
  Case c_;
  std::int64_t batch_ = 0, total_q_ = 0, total_k_ = 0;
};

}  // namespace fastattn::harness
