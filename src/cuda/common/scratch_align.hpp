// scratch_align.hpp — sub-buffers inside one scratch block start on 256-byte boundaries
// (cudaMalloc's alignment; enough for every vector access). Host-only, no CUDA headers, so the
// dispatcher's plans can size scratch with the same rule the launchers lay it out with.
#pragma once

#include <cstddef>

namespace fastattn::cuda {

constexpr std::size_t scratch_align(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace fastattn::cuda
