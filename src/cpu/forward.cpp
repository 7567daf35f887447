// forward.cpp — cpu::forward: runs the instantiation of the forward kernel that the
// dispatcher chose (CpuKernelPlan: the ISA, the bf16 form, AMX; the decode kernel where
// decode_plan says so, the same function the dispatcher asked), never another.
#include <string>

#include "cpu/cpu_backend.hpp"
#include "cpu/forward_isa.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {

void forward(const AttentionProblem& p, const CpuKernelPlan& plan) {
  const Isa isa = plan.isa;
  if (isa == Isa::none || static_cast<int>(isa) > static_cast<int>(detect_isa())) {
    throw Error(ErrorCode::unsupported,
                "cpu forward: expected an ISA this CPU and build run (at most " +
                    std::string(to_string(detect_isa())) + "), got " + to_string(isa));
  }
  if (plan.decode.use) return run_decode_plan(p, plan.decode, isa, nullptr, DecodeBuffers{});
  const int threads = p.num_threads > 0 ? p.num_threads : plan.num_threads;
  ForwardTiles tiles;
  tiles.block_q = plan.block_q;
  tiles.block_k = plan.block_k;
  tiles.num_threads = threads;
  const std::string kernel = std::string("the ") + to_string(isa) + (plan.amx != amx::AmxMode::off ? " AMX" : "") +
                             " kernel";  // for errors
  const amx::AmxMode amx_mode = plan.amx;
  if (amx_mode != amx::AmxMode::off) {
    if (p.dtype != DType::bf16 || p.head_dim % 32 != 0) {
      throw Error(ErrorCode::unsupported, "cpu forward: " + kernel +
                                              " expects bf16 inputs with head_dim a multiple of 32, got " +
                                              std::string(to_string(p.dtype)) + " head_dim " +
                                              std::to_string(p.head_dim));
    }
    if (amx_mode == amx::AmxMode::native) {
#if defined(FASTATTN_HAVE_AMX) && FASTATTN_HAVE_AMX
      forward_amx(p, tiles);
      return;
#endif
    } else if (isa == Isa::avx2) {
      forward_amx_emulated_avx2(p, tiles);
      return;
    } else {
#if FASTATTN_HAVE_AVX512
      forward_amx_emulated_avx512(p, tiles);
      return;
#endif
    }
    throw Error(ErrorCode::unsupported, "cpu forward: " + kernel + " is not in this build");
  }
  const Bf16Dot dot = plan.dot;
  if (dot != Bf16Dot::off && p.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, "cpu forward: " + kernel + " expects bf16 inputs, got " +
                                            std::string(to_string(p.dtype)));
  }
  if (dot == Bf16Dot::native && isa != Isa::avx512bf16 && isa != Isa::amx) {
    throw Error(ErrorCode::unsupported, "cpu forward: " + kernel + " needs AVX-512 BF16, got ISA " +
                                            std::string(to_string(isa)));
  }
  switch (isa) {
    case Isa::avx2:
      if (dot == Bf16Dot::emulated) {
        forward_bf16_emulated_avx2(p, tiles);
      } else {
        forward_avx2(p, tiles);
      }
      return;
    case Isa::avx512:
    case Isa::avx512bf16:
    case Isa::amx:
#if FASTATTN_HAVE_AVX512
      if (dot == Bf16Dot::off) {
        forward_avx512(p, tiles);
      } else {
        forward_bf16_avx512(p, tiles, dot == Bf16Dot::native);
      }
      return;
#else
      break;
#endif
    case Isa::none:
      break;
  }
  throw Error(ErrorCode::unsupported,
              std::string("cpu forward: no kernel for ISA ") + to_string(isa) + " in this build");
}

void run_decode_plan(const AttentionProblem& p, const DecodePlan& plan, Isa isa, const DecodeKeys* cache,
                     const DecodeBuffers& buffers) {
  if (plan.form != DecodeForm::f32_tiles && p.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, std::string("cpu decode: form ") + to_string(plan.form) +
                                            " expects bf16 inputs, got " + to_string(p.dtype));
  }
  if (plan.amx == amx::AmxMode::native) {
#if defined(FASTATTN_HAVE_AMX) && FASTATTN_HAVE_AMX
    return decode_amx(p, plan, cache, buffers);
#else
    throw Error(ErrorCode::unsupported, "cpu decode: this build has no AMX kernels");
#endif
  }
  if (isa == Isa::avx2) return decode_avx2(p, plan, cache, buffers);
#if FASTATTN_HAVE_AVX512
  return decode_avx512(p, plan, cache, buffers);
#else
  throw Error(ErrorCode::unsupported, std::string("cpu decode: no kernel for ISA ") + to_string(isa) + " in this build");
#endif
}

}  // namespace fastattn::cpu
