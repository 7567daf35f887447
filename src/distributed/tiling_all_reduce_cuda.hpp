// tiling_all_reduce_cuda.hpp — the CUDA form of tiled_all_reduce / matmul_all_reduce (NCCL
// builds: tiling_all_reduce_cuda.cpp); without NCCL these throw unsupported.
#pragma once

#include "fastattn/distributed.hpp"

namespace fastattn::distributed {

#if FASTATTN_HAVE_NCCL
TilingAllReduceReport tiled_all_reduce_cuda(Communicator& comm, const TensorView& out,
                                            const std::function<void(std::int64_t, std::int64_t)>& produce,
                                            const TilingAllReduceOptions& options);
TilingAllReduceReport matmul_all_reduce_cuda(Communicator& comm, const TensorView& attn_out, const TensorView& w_o,
                                             const TensorView& out, const TilingAllReduceOptions& options);
#else
inline TilingAllReduceReport tiled_all_reduce_cuda(Communicator&, const TensorView&,
                                                   const std::function<void(std::int64_t, std::int64_t)>&,
                                                   const TilingAllReduceOptions&) {
  throw Error(ErrorCode::unsupported, "tiled_all_reduce: CUDA tensors need a build with NCCL (CMake FASTATTN_NCCL)");
}
inline TilingAllReduceReport matmul_all_reduce_cuda(Communicator&, const TensorView&, const TensorView&,
                                                    const TensorView&, const TilingAllReduceOptions&) {
  throw Error(ErrorCode::unsupported, "matmul_all_reduce: CUDA tensors need a build with NCCL (CMake FASTATTN_NCCL)");
}
#endif

}  // namespace fastattn::distributed
