// tensor_import.cpp — DLPack metadata (dtype, device, shape, strides) to TensorView.
#include "tensor_import.hpp"

#include <string>

#include "fastattn/error.hpp"

namespace fastattn::python {
namespace {

namespace dl = nb::dlpack;

[[noreturn]] void fail(const char* name, const std::string& expected, const std::string& actual) {
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + ": expected " + expected + ", got " + actual);
}

// "float64", "int8", "bfloat16", ... as the array libraries spell them.
std::string dtype_name(dl::dtype dt) {
  std::string base;
  switch (static_cast<dl::dtype_code>(dt.code)) {
    case dl::dtype_code::Int: base = "int"; break;
    case dl::dtype_code::UInt: base = "uint"; break;
    case dl::dtype_code::Float: base = "float"; break;
    case dl::dtype_code::Bfloat: base = "bfloat"; break;
    case dl::dtype_code::Complex: base = "complex"; break;
    case dl::dtype_code::Bool: return "bool";
    default: base = "dlpack code " + std::to_string(dt.code) + " bits "; break;
  }
  std::string name = base + std::to_string(dt.bits);
  if (dt.lanes != 1) name += "x" + std::to_string(dt.lanes);
  return name;
}

// The fastattn dtype of a DLPack dtype, when fastattn has one.
std::optional<DType> fastattn_dtype(dl::dtype dt, bool u16_is_bf16) {
  if (dt.lanes != 1) return std::nullopt;
  const auto code = static_cast<dl::dtype_code>(dt.code);
  if (code == dl::dtype_code::Float && dt.bits == 32) return DType::f32;
  if (code == dl::dtype_code::Float && dt.bits == 16) return DType::f16;
  if (code == dl::dtype_code::Bfloat && dt.bits == 16) return DType::bf16;
  if (code == dl::dtype_code::UInt && dt.bits == 16 && u16_is_bf16) return DType::bf16;
  if (code == dl::dtype_code::Int && dt.bits == 32) return DType::i32;
  return std::nullopt;
}

const char* expected_dtypes(Role role) {
  switch (role) {
    case Role::data:
    case Role::data_output: return "dtype float32, float16 or bfloat16";
    case Role::lse:
    case Role::lse_output: return "dtype float32";
    case Role::index: return "dtype int32";
  }
  return "";
}

template <typename Array>
Device device_of(const Array& a, const char* name) {
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory: the CPU reads it directly
      return Device::cpu();
    case nb::device::cuda::value:
    case nb::device::cuda_managed::value:
      return Device::cuda(a.device_id());
    default:
      fail(name, "a CPU or CUDA array", "DLPack device type " + std::to_string(a.device_type()));
  }
}

[[noreturn]] void fail_not_array(nb::handle obj, const char* name) {
  const std::string type = nb::type_name(obj.type()).c_str();
  fail(name, "an array (NumPy, PyTorch, CuPy, JAX or any DLPack producer)", "an object of type " + type);
}

// The view of an imported array, after checking what `role` allows.
template <typename Array>
TensorView view_of(const Array& array, const char* name, Role role, bool u16_is_bf16) {
  const std::size_t ndim = array.ndim();
  if (ndim > static_cast<std::size_t>(TensorView::kMaxRank)) {
    fail(name, "rank <= 4", "rank " + std::to_string(ndim));
  }
  const std::optional<DType> dtype = fastattn_dtype(array.dtype(), u16_is_bf16);
  bool fits = false;
  switch (role) {
    case Role::data:
    case Role::data_output: fits = dtype && *dtype != DType::i32; break;
    case Role::lse:
    case Role::lse_output: fits = dtype == DType::f32; break;
    case Role::index: fits = dtype == DType::i32; break;
  }
  if (!fits) fail(name, expected_dtypes(role), "dtype " + dtype_name(array.dtype()));

  TensorView t;
  t.dtype = *dtype;
  t.device = device_of(array, name);
  t.rank = static_cast<int>(ndim);
  for (std::size_t d = 0; d < ndim; ++d) {
    t.shape[d] = static_cast<std::int64_t>(array.shape(d));
    t.stride[d] = array.stride(d);
  }
  t.data = const_cast<void*>(static_cast<const void*>(array.data()));
  if (t.numel() == 0) {
    // Strides of an empty array mean nothing and producers report anything (NumPy: all 0);
    // describe it as row-major so the library's layout checks see a well-formed view.
    std::int64_t stride = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.stride[d] = stride;
      stride *= t.shape[d] > 0 ? t.shape[d] : 1;
    }
  }
  return t;
}

}  // namespace

// No conversion anywhere (convert = false): an array nanobind would have to copy is refused.
TensorView ImportedTensors::import(nb::handle obj, const char* name, Role role, bool u16_is_bf16) {
  if (role == Role::data_output || role == Role::lse_output) {
    if (output_count_ == kMaxTensors) throw Error(ErrorCode::internal, "python: too many outputs");
    nb::ndarray<>& array = outputs_[output_count_];
    if (!nb::try_cast(obj, array, /*convert=*/false)) {
      nb::ndarray<nb::ro> probe;
      if (nb::try_cast(obj, probe, /*convert=*/false)) fail(name, "a writable array", "a read-only one");
      fail_not_array(obj, name);
    }
    ++output_count_;
    return view_of(array, name, role, u16_is_bf16);
  }
  if (input_count_ == kMaxTensors) throw Error(ErrorCode::internal, "python: too many inputs");
  nb::ndarray<nb::ro>& array = inputs_[input_count_];
  if (!nb::try_cast(obj, array, /*convert=*/false)) fail_not_array(obj, name);
  ++input_count_;
  return view_of(array, name, role, u16_is_bf16);
}

std::optional<TensorView> ImportedTensors::import_optional(nb::handle obj, const char* name,
                                                           Role role, bool u16_is_bf16) {
  if (obj.is_none()) return std::nullopt;
  return import(obj, name, role, u16_is_bf16);
}

}  // namespace fastattn::python
