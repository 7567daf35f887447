// fastattn/tensor.hpp — non-owning views over caller memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace fastattn {

enum class DType { f32, f16, bf16, i32 };

std::size_t dtype_size(DType dtype) noexcept;
const char* to_string(DType dtype) noexcept;

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int ordinal = 0) { return {DeviceType::cuda, ordinal}; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  bool operator!=(const Device& other) const { return !(*this == other); }
};

std::string to_string(const Device& device);

// A view of up to 4 dimensions over memory the caller owns. Shape and strides count
// elements, not bytes. Attention tensors use the layout
//   padded batch: [batch, seqlen, heads, head_dim]
//   varlen:       [total_tokens, heads, head_dim]   (with cu_seqlens, see AttentionOptions)
// with any strides, except that head_dim must be contiguous (stride 1).
struct TensorView {
  static constexpr int kMaxRank = 4;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int rank = 0;
  std::int64_t shape[kMaxRank] = {0, 0, 0, 0};
  std::int64_t stride[kMaxRank] = {0, 0, 0, 0};

  std::int64_t numel() const noexcept;
  bool is_contiguous() const noexcept;
  std::string shape_string() const;  // "[2, 128, 8, 64]"
};

// A contiguous (row-major) view.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       Device device = Device::cpu());
// A strided view; strides are in elements.
TensorView make_tensor(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                       std::initializer_list<std::int64_t> strides, Device device = Device::cpu());

}  // namespace fastattn
