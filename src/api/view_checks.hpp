// view_checks.hpp — the structural checks every tensor argument of the public API gets, shared
// by the attention calls (validate.cpp) and merge_states (src/inference/merge_validate.cpp), so
// both refuse a bad view with the same words: "<argument>: expected <what>, got <actual>".
#pragma once

#include <cstdint>
#include <string>

#include "fastattn/tensor.hpp"

namespace fastattn {

// Throws invalid_argument "<arg>: expected <expected>, got <actual>".
[[noreturn]] void fail_argument(const std::string& arg, const std::string& expected, const std::string& actual);

// Sizes and strides non-negative, element offsets and the byte extent within 64 bits, data
// non-null when the view is not empty. The rank is the caller's check.
void check_view_layout(const TensorView& t, const std::string& name);

// The byte range [begin, end) a view can touch; end == begin for an empty view. Valid after
// check_view_layout (no overflow).
struct ByteSpan {
  std::uintptr_t begin = 0, end = 0;
};
ByteSpan byte_span(const TensorView& t);

// An output view must not write one element twice: throws "<name>: expected an output view whose
// elements do not overlap ..." or "... non-zero strides on an output" (the test of validate.cpp).
void check_writable_view(const TensorView& t, const std::string& name);

// Whether the byte ranges of two non-empty views overlap.
bool views_overlap(const TensorView& a, const TensorView& b);

}  // namespace fastattn
