// row_softmax.hpp — vectorised pieces of a softmax row for the standard-attention baseline.
//
// A fair baseline needs a vectorised exp (PyTorch's math path has one); scalar std::exp
// would make the baseline's softmax slower than its two sgemms. Each function is compiled for
// AVX-512F, AVX2 and baseline x86-64 (GCC target_clones) and the best runs.
#pragma once

#include <cstdint>

namespace fastattn::bench {

float row_max(const float* s, std::int64_t n);
// s[j] = exp(s[j] - shift) for j < n (s[j] <= shift); returns the sum. Relative error about
// 2e-7 (a Cephes polynomial); arguments below -87 give about 1.6e-38.
float exp_shifted_sum(float* s, std::int64_t n, float shift);
void scale_row(float* s, std::int64_t n, float factor);

}  // namespace fastattn::bench
