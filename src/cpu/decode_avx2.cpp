// decode_avx2.cpp — the decode kernel (decode_kernel.hpp) instantiated for AVX2: f32 tiles, or
// q.k on bf16 pairs emulated (DecodeForm::bf16_pairs: FASTATTN_CPU_BF16_DOT=emulated, a test
// path).
#include <string>

#include "cpu/decode_kernel.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {

void decode_avx2(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                 const DecodeBuffers& buffers) {
  using V = simd::Avx2;
  switch (plan.form) {
    case DecodeForm::f32_tiles: return decode_detail::run_decode<V, DecodeForm::f32_tiles>(p, plan, cache, buffers);
    case DecodeForm::bf16_pairs: return decode_detail::run_decode<V, DecodeForm::bf16_pairs>(p, plan, cache, buffers);
    case DecodeForm::bf16_widened:
    case DecodeForm::bf16_dot:
    case DecodeForm::amx: break;  // AVX-512's
  }
  throw Error(ErrorCode::internal, std::string("cpu decode: form ") + to_string(plan.form) + " has no AVX2 kernel");
}

}  // namespace fastattn::cpu
