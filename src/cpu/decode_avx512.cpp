// decode_avx512.cpp — the decode kernel (decode_kernel.hpp) instantiated for AVX-512: f32 dot
// products, q.k on vdpbf16ps (bf16 inputs on AVX-512 BF16), or its emulation (a test path);
// and the AMX form on emulated tiles (FASTATTN_CPU_AMX=emulated, a test path).
// _mm512_reduce_add_ps / _mm512_reduce_max_ps start from _mm256_undefined_pd(), which GCC 12
// reports as -Wuninitialized where they inline (GCC bug 105593, see simd.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "cpu/decode_kernel.hpp"
#include "cpu/forward_isa.hpp"

namespace fastattn::cpu {

void decode_avx512(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                   const DecodeBuffers& buffers) {
  using V = simd::Avx512;
  if (plan.amx == amx::AmxMode::emulated) {
    return decode_detail::run_decode<V, Bf16Dot::off, amx::Emulated>(p, plan, cache, buffers);
  }
  switch (plan.dot) {
    case Bf16Dot::native: return decode_detail::run_decode<V, Bf16Dot::native>(p, plan, cache, buffers);
    case Bf16Dot::emulated: return decode_detail::run_decode<V, Bf16Dot::emulated>(p, plan, cache, buffers);
    case Bf16Dot::off: return decode_detail::run_decode<V, Bf16Dot::off>(p, plan, cache, buffers);
  }
}

}  // namespace fastattn::cpu
