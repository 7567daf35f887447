// amx_gemm_amx.cpp — gemm_bf16 on the AMX instructions (compiled with the AMX flags).
#include <string>

#include "cpu/amx.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu::amx {

void gemm_bf16_native(std::int64_t m, std::int64_t n, std::int64_t k, const std::uint16_t* a, std::int64_t lda,
                      const std::uint32_t* b, std::int64_t ldb, float* c, std::int64_t ldc, bool accumulate) {
  if (!amx_available()) {
    throw Error(ErrorCode::unsupported,
                std::string("amx gemm: expected a CPU and OS with AMX, got none: ") + amx_unavailable_reason());
  }
  TileScope<Native> scope(gemm_config());
  gemm_bf16<Native>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
}

}  // namespace fastattn::cpu::amx
