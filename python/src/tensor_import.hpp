// tensor_import.hpp — Python array objects to fastattn::TensorView, without a copy.
//
// Anything nanobind's ndarray accepts is a tensor here: objects with __dlpack__ (PyTorch, CuPy,
// JAX, NumPy), DLPack capsules, and buffer-protocol objects. The view borrows the memory; the
// ImportedTensors that made it keep the producer's export alive until the call returns.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>

#include "fastattn/tensor.hpp"

namespace fastattn::python {

namespace nb = nanobind;

// What an argument is for; decides the dtypes it may have and whether it must be writable.
enum class Role {
  data,           // q, k, v, dout, out (as a backward input): f32, f16 or bf16
  data_output,    // out, dq, dk, dv: as data, and writable
  lse,            // lse as a backward input: f32
  lse_output,     // lse written by forward: f32, writable
  index,          // cu_seqlens_q/k: i32
};

// Owns the imports of one call (at most kMaxTensors arrays) so their memory stays valid while
// the kernel runs with the GIL released. Destroy only with the GIL held.
class ImportedTensors {
 public:
  static constexpr int kMaxTensors = 12;

  // Imports `obj` as argument `name`. `u16_is_bf16`: a uint16 array holds bfloat16 bit patterns
  // (NumPy has no bfloat16; the Python layer passes ml_dtypes arrays as uint16 views).
  // Throws fastattn::Error(invalid_argument) naming the argument when `obj` is not a usable
  // array: not an array, an unsupported dtype, device or rank, or read-only for an output.
  TensorView import(nb::handle obj, const char* name, Role role, bool u16_is_bf16);

  // As import(), but None gives std::nullopt.
  std::optional<TensorView> import_optional(nb::handle obj, const char* name, Role role,
                                            bool u16_is_bf16);

 private:
  // Inputs are imported read-only; outputs writable, so a read-only export (a NumPy array with
  // writeable=False, a JAX array) is refused instead of written through.
  nb::ndarray<nb::ro> inputs_[kMaxTensors];
  nb::ndarray<> outputs_[kMaxTensors];
  int input_count_ = 0;
  int output_count_ = 0;
};

}  // namespace fastattn::python
