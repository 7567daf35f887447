// cpu_backend.hpp — the CPU FlashAttention-2 backend's entry points.
//
// The dispatcher (src/api/dispatch.cpp) picks the ISA, the kernel form and the tile sizes and
// passes them in a CpuKernelPlan (its KernelChoice is the report for people, never read back);
// these functions run exactly that plan and never fall back to another.
#pragma once

#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "cpu/amx.hpp"
#include "cpu/decode_keys.hpp"
#include "fastattn/options.hpp"

namespace fastattn::cpu {

// Instruction sets the CPU kernels are compiled for, best last. amx: AVX-512 BF16 plus AMX
// tiles with the OS permission (amx.hpp: amx_available()); only the bf16 forward has an AMX
// kernel, every other call on Isa::amx runs the avx512bf16 kernels.
enum class Isa { none, avx2, avx512, avx512bf16, amx };

const char* to_string(Isa isa) noexcept;
Isa isa_from_string(const std::string& name);  // throws Error on an unknown name
Isa detect_isa();                     // best ISA this CPU and this build support
std::vector<Isa> compiled_isas();     // ISAs with kernels in this binary
// FASTATTN_CPU_ISA=avx2 (etc.) caps the ISA, for testing the narrower kernels on a wider CPU.
Isa selected_isa();

// How a bf16 forward multiplies (forward_bf16.hpp): vdpbf16ps on bf16 pairs (native: bf16
// inputs on Isa::avx512bf16), the same bf16-pair kernel with the dot product emulated by two
// FMAs (emulated: only with FASTATTN_CPU_BF16_DOT=emulated, to test that kernel on any CPU), or
// the f32 kernel (off: other dtypes and CPUs, or FASTATTN_CPU_BF16_DOT=off).
// By default the native kernel runs only where it pays: the first bf16 forward on an AVX-512
// BF16 CPU measures vdpbf16ps against the zmm FMA (bf16_dot_speed_ratio) and takes the pair
// kernel when the dot product's FLOP rate is >= kBf16DotMinRatio times the FMA's (the pair
// kernel also copies K and V as bf16 and packs P, so a small edge is not enough).
// FASTATTN_CPU_BF16_DOT=native forces it (an error without AVX-512 BF16).
enum class Bf16Dot { off, native, emulated };
inline constexpr const char* kBf16DotEnv = "FASTATTN_CPU_BF16_DOT";
inline constexpr double kBf16DotMinRatio = 1.25;
const char* to_string(Bf16Dot dot) noexcept;
Bf16Dot forward_bf16_dot(Isa isa, DType dtype);  // reads FASTATTN_CPU_BF16_DOT; throws on a bad value
double bf16_dot_speed_ratio();  // measured once per process; 0 without AVX-512 BF16
std::string ratio_text(double ratio);  // "1.97": a speed ratio as kernel reasons print it

// Whether a forward runs the AMX kernel (forward_amx.hpp): native on Isa::amx for bf16 with
// head_dim a multiple of 32, unless FASTATTN_CPU_AMX=off or FASTATTN_CPU_BF16_DOT asks for the
// bf16-pair kernel; emulated (any ISA) with FASTATTN_CPU_AMX=emulated. *why gets the reason
// for the choice or against AMX ("" for non-bf16). Throws on a bad FASTATTN_CPU_AMX.
amx::AmxMode forward_amx_mode(Isa isa, DType dtype, std::int64_t head_dim, std::string* why);
// Whether the backward runs the bf16 kernels on AMX tiles (backward_amx.hpp): native on Isa::amx
// for bf16 (any head_dim: the kernels pad it) unless FASTATTN_CPU_AMX=off, so FASTATTN_CPU_ISA
// capped below amx turns it off (an error with FASTATTN_CPU_AMX=native, as in the forward); emulated with FASTATTN_CPU_AMX=emulated on an ISA of at least
// avx512 (the kernels' element-wise math is AVX-512); off for f32 and f16 (their products stay
// f32). *why gets the reason for the choice or against AMX ("" for non-bf16). The dispatcher
// names the choice (isa "amx" or ".amx-emulated.") and backward() runs the same decision.
amx::AmxMode backward_amx_mode(Isa isa, DType dtype, std::string* why);

// ---- the decode kernel (decode_kernel.hpp): short queries over a long KV cache ------------
// Chosen for seqlen_q <= kDecodeMaxQueries (FASTATTN_CPU_DECODE=on/off forces it either way).
// A work unit is (sequence, KV head, row chunk, key split): the rows of all query heads of the
// KV head and all query tokens form one tile (GQA packing), so each K/V byte is read once per
// KV head and row chunk; each split writes a partial (out, lse) that merge_weights
// (inference/merge_problem.hpp) folds exactly. Threshold measured in docs/inference-cpu-decode.md:
// at 16 queries the decode kernel still beats the prefill kernel on GQA shapes.
inline constexpr std::int64_t kDecodeMaxQueries = 16;
inline constexpr std::int64_t kDecodeMaxRows = 64;         // packed rows per work unit
inline constexpr std::int64_t kDecodeMinSplitKeys = 512;   // keys per split, at least (auto)
inline constexpr std::int64_t kDecodeMaxSplits = 64;
inline constexpr int kDecodeUnitsPerThread = 4;            // auto splits: load balance target
inline constexpr std::int64_t kDecodeUnitStateBytes = 256 * 1024;  // Q + O of a unit's heads
// AMX from this many packed rows per KV head (group * seqlen_q) up: below, a 16-row tile is
// mostly padding and the vector form wins (measured in docs/inference-cpu-decode.md).
inline constexpr std::int64_t kDecodeAmxMinRows = 8;
inline constexpr std::int64_t kDecodeMaxBlockK = 128;      // keys per inner tile, at most

// How a decode unit forms its two products (q.k and P V); decode_plan chooses it, with the
// reason, and the kernels take it as a template parameter (decode_kernel.hpp):
//   f32_tiles     K/V rows converted to f32 tiles in L1, f32 FMAs (every dtype and ISA);
//   bf16_widened  bf16 K/V read in place and widened in registers (a shift), f32 FMAs over
//                 several query rows per load (decode_bf16_split.hpp): bf16 on any AVX-512,
//                 BF16 extension or not (no vdpbf16ps);
//   bf16_dot      both products on vdpbf16ps, K and V read in place: q.k on K's words as they
//                 are (one instruction per 32 products instead of two FMAs and a share of the
//                 widening), P rounded to bf16 (as the GPU kernels round it) and P V on key
//                 pairs, two V rows interleaved in registers (half the widened form's
//                 instructions); the next tile's prefetches spread through the products. Every
//                 AVX-512 BF16 CPU, whatever vdpbf16ps's rate (AMD Zen 4 2x the FMA's,
//                 Sapphire Rapids 0.5x: faster than bf16_widened on both, decode_plan.cpp);
//   bf16_pairs    q.k on bf16 pairs row by row with the dot product emulated (AVX2 with
//                 FASTATTN_CPU_BF16_DOT=emulated: a test path of the pair code);
//   amx           both products on AMX tiles (decode_unit_amx.hpp; DecodePlan::amx says native
//                 or emulated).
enum class DecodeForm { f32_tiles, bf16_widened, bf16_dot, bf16_pairs, amx };
const char* to_string(DecodeForm form) noexcept;

struct DecodePlan {
  bool use = false;
  DecodeForm form = DecodeForm::f32_tiles;
  amx::AmxMode amx = amx::AmxMode::off;  // form amx: native or emulated tiles
  std::int64_t rows = 0;        // packed rows per work unit (<= kDecodeMaxRows)
  std::int64_t row_chunks = 0;  // work units per (sequence, KV head) along the rows
  std::int64_t heads_per_unit = 0;  // KV heads per work unit, read token by token together
  std::int64_t head_blocks = 0;     // ceil(num_kv_heads / heads_per_unit)
  std::int64_t splits = 0;      // key splits per (sequence, KV head, row chunk)
  std::int64_t block_k = 0;     // keys per inner tile
  int threads = 0;
  std::string reason;
};
// Whether and how the decode kernel runs `p` on `isa` with `threads` threads; reads
// FASTATTN_CPU_DECODE, FASTATTN_CPU_DECODE_SPLITS and FASTATTN_CPU_BF16_DOT (throws on a bad
// value). The dispatcher and cpu::forward both call it, so the two agree.
DecodePlan decode_plan(const AttentionProblem& p, Isa isa, int threads);

// Scratch of a decode call: the split partials (out and lse of every unit) and, per thread, the
// tiles of decode_kernel.hpp (DecodeGeometry), 64-byte multiples.
struct DecodeScratchSize {
  std::size_t parts_bytes = 0;
  std::size_t thread_bytes = 0;
};
DecodeGeometry decode_geometry(const AttentionProblem& p, const DecodePlan& plan);
DecodeScratchSize decode_scratch_size(const AttentionProblem& p, const DecodePlan& plan);
// A caller's scratch for a decode call (a KV-cache plan owns it, so its run does not allocate):
// parts: parts_bytes; threads: plan.threads x thread_bytes; 64-byte aligned. Null members: the
// call takes its scratch from the host pools (api/host_pool.hpp).
struct DecodeBuffers {
  float* parts = nullptr;
  float* threads = nullptr;
};

// Runs the decode kernel of `plan` (made by decode_plan for `isa`) on p: its K/V, or with
// `cache` a KV cache's pages and lengths (decode_keys.hpp; p is then the KVCacheProblem's attn).
void run_decode_plan(const AttentionProblem& p, const DecodePlan& plan, Isa isa, const DecodeKeys* cache,
                     const DecodeBuffers& buffers);

// What the dispatcher chose for one CPU forward or backward call (choose_kernel fills it beside
// the KernelChoice it reports), run as is below.
struct CpuKernelPlan {
  DecodePlan decode;                     // forward: decode.use, the decode kernel's plan (on isa)
  Isa isa = Isa::none;                   // the kernel instantiation
  Bf16Dot dot = Bf16Dot::off;            // forward, bf16: the bf16-pair kernel, native or emulated
  amx::AmxMode amx = amx::AmxMode::off;  // bf16: AMX tiles, native or emulated
  int block_q = 0, block_k = 0;          // tiles (0: the kernel's own)
  int num_threads = 0;                   // 0: OpenMP's default (p.num_threads first)
};

// Run the forward/backward pass of `p` as `plan` says (the forward: plan.decode when it is used).
void forward(const AttentionProblem& p, const CpuKernelPlan& plan);
void backward(const AttentionProblem& p, const CpuKernelPlan& plan);

// Scratch the backward pass needs from the workspace (dQ partial sums), in bytes.
std::size_t backward_workspace_bytes(const AttentionProblem& p, const CpuKernelPlan& plan);

}  // namespace fastattn::cpu
