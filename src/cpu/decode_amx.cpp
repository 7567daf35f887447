// decode_amx.cpp — the decode kernel's AMX form (decode_kernel.hpp, decode_unit_amx) on the AMX
// instructions; compiled with the AMX flags, entered only when decode_plan chose native AMX.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // _mm512_reduce_*: GCC bug 105593, see decode_avx512.cpp
#endif
#include "cpu/decode_kernel.hpp"
#include "cpu/forward_isa.hpp"

namespace fastattn::cpu {

void decode_amx(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                const DecodeBuffers& buffers) {
  decode_detail::run_decode<simd::Avx512, DecodeForm::amx, amx::Native>(p, plan, cache, buffers);
}

}  // namespace fastattn::cpu
