// forward_isa.hpp — the per-ISA instantiations of the CPU forward kernel.
//
// forward.cpp (plain flags) picks one of these from CpuKernelPlan::isa; each is defined in a
// file compiled for its instruction set (forward_avx2.cpp, forward_avx512.cpp,
// forward_bf16_avx2.cpp, forward_bf16_avx512.cpp).
#pragma once

#include "common/problem.hpp"
#include "cpu/cpu_backend.hpp"

namespace fastattn::cpu {

// What the forward kernel needs from a CpuKernelPlan, already resolved.
struct ForwardTiles {
  int block_q = 0;      // query rows per work unit; 0: the kernel's default
  int block_k = 0;      // keys per inner tile; 0: the kernel's default
  int num_threads = 0;  // OpenMP threads; 0: OpenMP's default
};

void forward_avx2(const AttentionProblem& p, const ForwardTiles& tiles);

// The AMX kernel (forward_amx.hpp), bf16 inputs with head_dim a multiple of 32: block_k is
// rounded up to a multiple of 32 (whole key-pair tiles).
inline ForwardTiles amx_forward_tiles(ForwardTiles t) {
  t.block_k = t.block_k > 0 ? (t.block_k + 31) / 32 * 32 : 64;
  return t;
}
// Tiles emulated (amx::Emulated), softmax on AVX2 / AVX-512.
void forward_amx_emulated_avx2(const AttentionProblem& p, const ForwardTiles& tiles);
#if FASTATTN_HAVE_AVX512
void forward_amx_emulated_avx512(const AttentionProblem& p, const ForwardTiles& tiles);
#endif
#if defined(FASTATTN_HAVE_AMX) && FASTATTN_HAVE_AMX
// Native AMX; only after amx_available().
void forward_amx(const AttentionProblem& p, const ForwardTiles& tiles);
#endif
// bf16 inputs only: the bf16-pair kernel with the dot product emulated (forward_bf16.hpp).
void forward_bf16_emulated_avx2(const AttentionProblem& p, const ForwardTiles& tiles);
// The decode kernel (decode_kernel.hpp) with its plan (decode_plan).
// cache, buffers: as run_decode_plan (cpu_backend.hpp).
void decode_avx2(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                 const DecodeBuffers& buffers);
#if FASTATTN_HAVE_AVX512
// Also the emulated AMX form.
void decode_avx512(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                   const DecodeBuffers& buffers);
#endif
#if defined(FASTATTN_HAVE_AMX) && FASTATTN_HAVE_AMX
void decode_amx(const AttentionProblem& p, const DecodePlan& plan, const DecodeKeys* cache,
                const DecodeBuffers& buffers);  // plan.amx == native
void forward_avx512(const AttentionProblem& p, const ForwardTiles& tiles);
// bf16 inputs only: native = vdpbf16ps (CPUs with AVX-512 BF16), else emulated.
void forward_bf16_avx512(const AttentionProblem& p, const ForwardTiles& tiles, bool native);
// vdpbf16ps FLOP rate / zmm FMA FLOP rate on this core, measured (~1 ms); AVX-512 BF16 only.
double bf16_dot_speed_ratio_avx512();
#endif

}  // namespace fastattn::cpu
