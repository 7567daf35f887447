// decode_avx2.cpp — the decode kernel (decode_kernel.hpp) instantiated for AVX2: f32 dot
// products, or the bf16-pair ones emulated (FASTATTN_CPU_BF16_DOT=emulated, a test path).
#include "cpu/decode_kernel.hpp"
#include "cpu/forward_isa.hpp"

namespace fastattn::cpu {

void decode_avx2(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                 const DecodeBuffers& buffers) {
  using V = simd::Avx2;
  if (plan.dot == Bf16Dot::emulated) {
    decode_detail::run_decode<V, Bf16Dot::emulated>(p, plan, cache, buffers);
  } else {
    decode_detail::run_decode<V, Bf16Dot::off>(p, plan, cache, buffers);
  }
}

}  // namespace fastattn::cpu
