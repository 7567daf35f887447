// view_checks.cpp — see view_checks.hpp.
#include "api/view_checks.hpp"

#include <utility>

#include "fastattn/error.hpp"

namespace fastattn {

void fail_argument(const std::string& arg, const std::string& expected, const std::string& actual) {
  throw Error(ErrorCode::invalid_argument, arg + ": expected " + expected + ", got " + actual);
}

void check_view_layout(const TensorView& t, const std::string& name) {
  std::int64_t elements = 1;
  std::int64_t last_offset = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0) fail_argument(name, "non-negative sizes", t.shape_string());
    if (t.stride[d] < 0) {
      fail_argument(name, "non-negative strides", "stride[" + std::to_string(d) + "] = " + std::to_string(t.stride[d]));
    }
    std::int64_t term = 0;
    if (__builtin_mul_overflow(elements, t.shape[d], &elements) ||
        (t.shape[d] > 0 && __builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &term)) ||
        __builtin_add_overflow(last_offset, term, &last_offset)) {
      fail_argument(name, "sizes and strides whose element offsets fit in 64 bits", t.shape_string());
    }
  }
  std::int64_t last_byte = 0;
  if (__builtin_mul_overflow(last_offset + 1, static_cast<std::int64_t>(dtype_size(t.dtype)), &last_byte)) {
    fail_argument(name, "a byte extent that fits in 64 bits", t.shape_string());
  }
  if (elements > 0 && t.data == nullptr) fail_argument(name, "a non-null data pointer", "nullptr");
}

ByteSpan byte_span(const TensorView& t) {
  if (t.numel() == 0) return {};
  std::int64_t last = 0;  // largest element offset; overflow was ruled out by check_view_layout
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.stride[d];
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  return {base, base + static_cast<std::uintptr_t>(last + 1) * dtype_size(t.dtype)};
}

void check_writable_view(const TensorView& t, const std::string& name) {
  if (t.numel() == 0) return;  // empty views write nothing (their strides may be 0)
  int dims[TensorView::kMaxRank];
  int n = 0;
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.stride[d] == 0) fail_argument(name, "non-zero strides on an output", "stride[" + std::to_string(d) + "] = 0");
    dims[n++] = d;
  }
  // Sufficient test: ordered by stride, each dimension's stride exceeds the extent spanned by
  // all smaller-stride dimensions together.
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && t.stride[dims[j]] < t.stride[dims[j - 1]]; --j) std::swap(dims[j], dims[j - 1]);
  std::int64_t span = 0;
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.stride[d] <= span) {
      std::string strides;
      for (int k = 0; k < t.rank; ++k) strides += (k ? ", " : "") + std::to_string(t.stride[k]);
      fail_argument(name,
                    "an output view whose elements do not overlap (stride[" + std::to_string(d) + "] > " +
                        std::to_string(span) + ")",
                    "strides " + strides);
    }
    span += (t.shape[d] - 1) * t.stride[d];
  }
}

bool views_overlap(const TensorView& a, const TensorView& b) {
  const ByteSpan x = byte_span(a), y = byte_span(b);
  return x.begin != x.end && y.begin != y.end && x.begin < y.end && y.begin < x.end;
}

}  // namespace fastattn
