// decode_avx512.cpp — the decode kernel (decode_kernel.hpp) instantiated for AVX-512: f32
// tiles, bf16 widened in registers (with or without the BF16 extension), both products on
// vdpbf16ps (the BF16 extension: the plan checks the ISA), and the AMX form on emulated tiles
// (FASTATTN_CPU_AMX=emulated, a test path).
// _mm512_reduce_add_ps / _mm512_reduce_max_ps start from _mm256_undefined_pd(), which GCC 12
// reports as -Wuninitialized where they inline (GCC bug 105593, see simd.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <string>

#include "cpu/decode_kernel.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {

void decode_avx512(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                   const DecodeBuffers& buffers) {
  using V = simd::Avx512;
  switch (plan.form) {
    case DecodeForm::f32_tiles: return decode_detail::run_decode<V, DecodeForm::f32_tiles>(p, plan, cache, buffers);
    case DecodeForm::bf16_widened:
      return decode_detail::run_decode<V, DecodeForm::bf16_widened>(p, plan, cache, buffers);
    case DecodeForm::bf16_dot:  // the plan chose it on an AVX-512 BF16 CPU only
      return decode_detail::run_decode<V, DecodeForm::bf16_dot>(p, plan, cache, buffers);
    case DecodeForm::amx:
      if (plan.amx == amx::AmxMode::emulated) {
        return decode_detail::run_decode<V, DecodeForm::amx, amx::Emulated>(p, plan, cache, buffers);
      }
      break;  // native tiles: decode_amx.cpp
    case DecodeForm::bf16_pairs: break;  // AVX2's
  }
  throw Error(ErrorCode::internal, std::string("cpu decode: form ") + to_string(plan.form) + " has no AVX-512 kernel here");
}

}  // namespace fastattn::cpu
