// launch_floor.cu — see launch_floor.hpp.
#include "launch_floor.hpp"

#include <string>

#include "fastattn/error.hpp"

namespace fastattn::bench {
namespace {

__global__ void empty_kernel() {}

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::device_error, std::string("launch_floor: ") + what + ": " + cudaGetErrorString(status));
  }
}

}  // namespace

void launch_empty(int blocks_x, int blocks_y, int smem_bytes, cudaStream_t stream) {
  static int raised = 0;  // the largest shared-memory attribute set so far
  if (smem_bytes > raised) {
    check(cudaFuncSetAttribute(empty_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
          "cudaFuncSetAttribute");
    raised = smem_bytes;
  }
  empty_kernel<<<dim3(blocks_x, blocks_y), 128, static_cast<size_t>(smem_bytes), stream>>>();
  check(cudaGetLastError(), "launch");
}

}  // namespace fastattn::bench
