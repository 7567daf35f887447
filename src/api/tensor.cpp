// tensor.cpp — TensorView helpers and enum names.
#include <string>

#include "fastattn/error.hpp"
#include "fastattn/options.hpp"
#include "fastattn/tensor.hpp"

namespace fastattn {

std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

const char* to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
  }
  return "?";
}

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::device_error: return "device_error";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::internal: return "internal";
  }
  return "?";
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::automatic: return "automatic";
    case Backend::cpu: return "cpu";
    case Backend::reference: return "reference";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

std::string to_string(const Device& device) {
  return device.type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(device.index);
}

std::int64_t TensorView::numel() const noexcept {
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const noexcept {
  std::int64_t expected = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

static TensorView make_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                            Device device) {
  if (shape.size() > static_cast<std::size_t>(TensorView::kMaxRank)) {
    throw Error(ErrorCode::invalid_argument,
                "make_tensor: expected rank <= 4, got " + std::to_string(shape.size()));
  }
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(shape.size());
  int d = 0;
  for (std::int64_t s : shape) t.shape[d++] = s;
  return t;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       Device device) {
  TensorView t = make_view(data, dtype, shape, device);
  std::int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorView make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, Device device) {
  TensorView t = make_view(data, dtype, shape, device);
  if (strides.size() != shape.size()) {
    throw Error(ErrorCode::invalid_argument, "make_tensor: expected " +
                                                 std::to_string(shape.size()) + " strides, got " +
                                                 std::to_string(strides.size()));
  }
  int d = 0;
  for (std::int64_t s : strides) t.stride[d++] = s;
  return t;
}

std::string KernelChoice::describe() const {
  std::string s = std::string(to_string(backend)) + ": " + kernel;
  if (!isa.empty()) s += " [" + isa + "]";
  if (block_q) s += " block_q=" + std::to_string(block_q);
  if (block_k) s += " block_k=" + std::to_string(block_k);
  if (num_threads) s += " threads=" + std::to_string(num_threads);
  if (workspace_bytes) s += " workspace=" + std::to_string(workspace_bytes) + "B";
  if (device_memory_bytes) s += " device_memory=" + std::to_string(device_memory_bytes) + "B";
  if (!reason.empty()) s += " (" + reason + ")";
  return s;
}

}  // namespace fastattn
