// tensor_map.hpp — host-side construction of the TMA tensor maps (CUtensorMap) of the attention
// operands, without linking libcuda: cuTensorMapEncodeTiled comes from the driver through the
// runtime's entry-point query (cudaGetDriverEntryPointByVersion, ABI of CUDA 12.0).
//
// An operand [batch, seqlen, heads, head_dim] with element strides (batch, token, head; the
// head_dim stride is 1) is described as a 4-D tensor (head_dim, seqlen, heads, batch),
// innermost first, and loaded in boxes of (64, box_rows, 1, 1): 64 16-bit elements are one
// 128-byte row of the 128-byte swizzle (sm90/wgmma.cuh), so a head_dim of 128 takes two boxes
// side by side. Rows past seqlen read as zeros (TMA's out-of-bounds fill), which is what the
// kernel's masked tiles need.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cuda::sm90 {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn tensor_map_encoder() {
  static const EncodeTiledFn fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion", "cuTensorMapEncodeTiled");
    if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
      throw Error(ErrorCode::device_error, "cuda forward (sm90): the driver has no cuTensorMapEncodeTiled");
    }
    return reinterpret_cast<EncodeTiledFn>(entry);
  }();
  return fn;
}

// One operand in elements; strides of dimensions of extent 1 are never stepped over.
struct TokenTensor {
  const void* data;
  std::int64_t batch, seqlen, heads, head_dim;
  std::int64_t batch_stride, token_stride, head_stride;
};

// caller: names the operation in the error (the KV-cache kernel's maps are TokenTensors of pages:
// batch = num_pages, seqlen = page_size).
inline CUtensorMap make_token_tensor_map(const TokenTensor& t, bool bf16, int box_rows, const char* name,
                                         const char* caller = "cuda forward (sm90)") {
  constexpr std::int64_t kElem = 2;
  // A dimension of extent 1 gets the packed stride (a legal multiple of 16 bytes) instead of
  // whatever the caller's view has there (possibly 0).
  const std::int64_t token = t.seqlen == 1 ? t.head_dim * kElem : t.token_stride * kElem;
  const std::int64_t head = t.heads == 1 ? token * t.seqlen : t.head_stride * kElem;
  const std::int64_t batch = t.batch == 1 ? head * t.heads : t.batch_stride * kElem;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.head_dim), static_cast<cuuint64_t>(t.seqlen),
                              static_cast<cuuint64_t>(t.heads), static_cast<cuuint64_t>(t.batch)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(token), static_cast<cuuint64_t>(head),
                                 static_cast<cuuint64_t>(batch)};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  CUtensorMap map;
  const CUresult r = tensor_map_encoder()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(t.data),
      dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(ErrorCode::device_error,
                std::string(caller) + ": cuTensorMapEncodeTiled failed for " + name + " (CUresult " +
                    std::to_string(static_cast<int>(r)) + ", strides in bytes " + std::to_string(token) + ", " +
                    std::to_string(head) + ", " + std::to_string(batch) + ")");
  }
  return map;
}

}  // namespace fastattn::cuda::sm90
