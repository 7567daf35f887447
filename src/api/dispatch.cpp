// dispatch.cpp — which kernel runs a call, and why.
//
// Read top to bottom: backend from the device (or the caller's request), then for the CPU the
// widest instruction set this machine runs, then the tile sizes for (ISA, dtype, head_dim).
// There is no silent fallback: a request no kernel serves is an Error naming what is missing.
#include "api/dispatch.hpp"

#include <omp.h>

#include <string>
#include <utility>

#include "cpu/cpu_backend.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#include "cuda/flash_bwd_sm90/plan.hpp"
#include "cuda/flash_fwd/heuristics.hpp"
#endif
#include "fastattn/error.hpp"

namespace fastattn {
namespace {

struct Tiles {
  int block_q;
  int block_k;
};

// Tiles of the CPU forward (src/cpu/forward_kernel.hpp; measurements in
// docs/cpu-forward-notes.md): block_q query rows per work unit, whose Q^T and O
// (2 * block_q * head_dim f32) stay in L2 and share each K/V tile; block_k keys per tile, a
// multiple of the micro-kernel's rows (AVX2 6, AVX-512 12). block_q is a multiple of 48
// (AVX2) / 96 (AVX-512) so that no query sub-block is padded.
Tiles cpu_forward_tiles(cpu::Isa isa, DType dtype, std::int64_t head_dim) {
  (void)dtype;  // tiles are sized in f32; block_k stays even for the bf16-pair kernel
  // The AMX kernel (forward_amx.hpp): key tiles of 192 (64: 0.8x, 128: 0.9x, 256: about equal,
  // docs/cpu-amx.md); the 96-query sub-blocks of the AVX-512 geometry.
  if (isa == cpu::Isa::amx) return {384, 192};
  const bool avx512 = isa == cpu::Isa::avx512 || isa == cpu::Isa::avx512bf16;
  if (avx512) return head_dim <= 128 ? Tiles{384, 96} : Tiles{192, 96};  // 2 MiB L2
  return Tiles{96, 60};  // Zen 3 (512 KiB L2): best of 48..192 x 36..96 at head_dim 128
}

// Tiles of the CPU backward: block_k keys per work unit (dK, dV stay resident), block_q query
// rows per inner step. Multiples of the micro-kernel's rows (AVX2 6, AVX-512 12) and of its
// panel width (16 / 32 keys) leave no ragged register tiles. Measured (docs/cpu-backward-notes.md):
// Zen 3 AVX2 d = 128, 48 x 96 ~30% faster than 64 x 64 on one thread (2% on two); d = 256,
// 48 x 96 beats 48 x 48 and 24 x 96; Xeon AVX-512 d = 256, 24 x 96 beats 48 x 96 by ~9%.
Tiles cpu_backward_tiles(cpu::Isa isa, DType dtype, std::int64_t head_dim) {
  (void)dtype;  // the kernels compute in f32 for every dtype
  if (head_dim <= 64) return {96, 96};
  if (head_dim <= 128 || isa == cpu::Isa::avx2) return {48, 96};
  return {24, 96};
}

// Tiles of the AMX bf16 backward (src/cpu/backward_amx.hpp): multiples of 32 (the tiles' k step)
// on both sides, since queries are the k of dV^T += dO^T P and keys the k of dQ = dS K. Measured
// (docs/cpu-amx.md, Sapphire Rapids, 1 thread, d = 128, b1 h8/2 s2048 causal): 128 x 128 ~1.5x
// 64 x 64, ahead of 64 x 128 and 128 x 64 (longer k loops per dK^T / dV^T tile load and store,
// fewer passes over the dq rows).
constexpr Tiles kAmxBackwardTiles{128, 128};

// "(vdpbf16ps measured 0.45x the FMA rate; the pair kernel needs >= 1.25x)" for the reason.
std::string fmt_ratio(double ratio) {
  return " (vdpbf16ps measured " + cpu::ratio_text(ratio) + "x the FMA rate here; the pair kernel needs >= " +
         cpu::ratio_text(cpu::kBf16DotMinRatio) + "x)";
}

Backend resolve_backend(const AttentionProblem& p, Backend requested) {
  const bool on_cpu = p.device.type == DeviceType::cpu;
  if (requested == Backend::automatic) return on_cpu ? Backend::cpu : Backend::cuda;
  if (requested == Backend::cuda && on_cpu) {
    throw Error(ErrorCode::invalid_argument,
                "options.backend: expected cpu, reference or automatic for tensors on cpu, got cuda");
  }
  if (requested != Backend::cuda && !on_cpu) {
    throw Error(ErrorCode::invalid_argument,
                std::string("options.backend: expected cuda or automatic for tensors on ") +
                    to_string(p.device) + ", got " + to_string(requested));
  }
  return requested;
}

#if FASTATTN_HAVE_CUDA
// The chosen path (forward or backward) must be in this build, compiled for an architecture
// the device runs: otherwise the launch would fail with "no kernel image is available".
void require_path_code(const char* what_text, cuda::ForwardPath path, int device) {
  if (cuda::path_compiled(path) && cuda::path_runs_on(path, device)) return;
  const std::string what = what_text, name = cuda::to_string(path);
  if (!cuda::path_compiled(path)) {
    throw Error(ErrorCode::unsupported,
                what + ": this build has no " + name + " (" + cuda::path_gpus(path) + ") kernels; " +
                    (path == cuda::ForwardPath::sm80
                         ? std::string("add an architecture >= 80 to the CMake option FASTATTN_CUDA_ARCHS")
                         : "add " + name + " to the CMake option FASTATTN_CUDA_LOWRES_PATHS, or " +
                               std::to_string(cuda::min_compute_capability(path)) + " to FASTATTN_CUDA_ARCHS"));
  }
  const int cc = cuda::compute_capability(device);
  throw Error(ErrorCode::unsupported, what + ": this build's " + name + " kernels are compiled for CUDA architectures " +
                                          cuda::path_archs(path) + ", none of which runs on this GPU (compute capability " +
                                          std::to_string(cc / 10) + "." + std::to_string(cc % 10) + "); add " +
                                          std::to_string(cc) + " to the CMake option FASTATTN_CUDA_ARCHS");
}

// Backward: one kernel design per head dim (flash_bwd/plan.hpp); deterministic mode splits the
// key blocks of each (batch, KV head) over enough CTAs to fill the GPU once.
KernelChoice choose_cuda_backward_kernel(const AttentionProblem& p) {
  if (!cuda::has_backward_kernel(p.dtype, p.head_dim)) {
    std::string dims;
    for (int d : cuda::compiled_head_dims()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw Error(ErrorCode::unsupported,
                std::string("cuda backward: expected dtype f16 or bf16 and head_dim in {") + dims +
                    "} (FASTATTN_CUDA_HEAD_DIMS of this build), got dtype " + to_string(p.dtype) +
                    " and head_dim " + std::to_string(p.head_dim));
  }
  // Path: the forward's (compute capability or FASTATTN_CUDA_PATH, forward_path.hpp); one
  // backward kernel design with sm80, sm75 and sm70 parts (flash_bwd/kernel.cuh).
  const cuda::ForwardPath path = cuda::backward_path(p.device.index);
  if (path != cuda::ForwardPath::sm80) {
    const std::string name = cuda::to_string(path);
    const std::string arch = path == cuda::ForwardPath::sm75 ? "Turing" : "Volta";
    if (!cuda::backward_path_supports(path, p.dtype == DType::bf16, p.head_dim)) {
      throw Error(ErrorCode::unsupported, "cuda backward: the " + name + " path (" + arch +
                                              ") expected dtype f16 and head_dim <= 128, got dtype " +
                                              to_string(p.dtype) + " and head_dim " + std::to_string(p.head_dim) +
                                              (p.dtype == DType::bf16 ? " (bf16 MMAs need sm80)" : ""));
    }
  }
  require_path_code("cuda backward", path, p.device.index);
  const cuda::BackwardPlan plan = cuda::backward_plan(p);
  if (plan.path == cuda::ForwardPath::sm90) require_path_code("cuda backward", plan.path, p.device.index);
  KernelChoice c;
  c.backend = Backend::cuda;
  c.isa = cuda::to_string(plan.path);
  c.kernel = "cuda.backward." + c.isa + "." + to_string(p.dtype) + ".d" + std::to_string(p.head_dim) +
             (plan.small_blocks ? ".small-smem" : "") +
             (p.deterministic ? ".deterministic" + std::to_string(plan.num_splits) : "");
  c.block_q = plan.blocks.block_m;
  c.block_k = plan.blocks.block_n;
  c.num_threads = plan.blocks.warps * 32;
  c.workspace_bytes = plan.workspace_bytes;
  c.reason = p.deterministic
                 ? "deterministic: " + std::to_string(plan.num_splits) +
                       " key-block splits per (batch, kv head), dQ buffers summed in split order"
                 : "key-block parallel, dQ accumulated in fp32 with atomics";
  // The sm90 backward (flash_bwd_sm90/plan.hpp: choose_sm90_backward chose it, or said why not).
  if (plan.path == cuda::ForwardPath::sm90) {
    c.reason = cuda::describe_backward_sm90(plan, p.deterministic);
  } else if (!plan.sm90_declined.empty()) {
    c.reason = "sm80 kernels on an sm90 device (" + plan.sm90_declined + "): " + c.reason;
  }
  if (plan.path != cuda::ForwardPath::sm80 && plan.path != cuda::ForwardPath::sm90) {
    c.reason += std::string(plan.path == cuda::ForwardPath::sm75
                                ? "; sm75 path (Turing): mma.sync m16n8k8, K/V copied synchronously and query blocks "
                                  "register-staged, tiles for 64 KB of shared memory"
                                : "; sm70 path (Volta): mma.sync m8n8k4 from padded shared rows (.col A for P^T and "
                                  "dS^T), synchronous global->shared copies, tiles for 96 KB of shared memory") +
                (cuda::forward_path_request().automatic ? "" : ", path forced by FASTATTN_CUDA_PATH");
  }
  if (plan.small_blocks) c.reason += "; small tiles for a GPU with 99 KB of shared memory per block";
  if (plan.tile_grid) {
    c.reason += "; unmasked tile grid of " + std::to_string(plan.tiles) + " tiles" +
                (plan.blocks.dq_before_dk ? ", dQ before dK" : "");
  }
  if (plan.tail.tiles > 0) {
    c.reason += "; tail split: the last " + std::to_string(plan.tail.tiles) + " of " + std::to_string(plan.tiles) +
                " key-block tiles cut into " + std::to_string(plan.tail.pieces) + " pieces each";
  }
  return c;
}
#endif

KernelChoice choose_cuda_kernel(const AttentionProblem& p, Direction direction, cuda::ForwardPlan* plan_out) {
#if FASTATTN_HAVE_CUDA
  if (direction == Direction::backward) return choose_cuda_backward_kernel(p);
  if (!cuda::has_forward_kernel(p.dtype, p.head_dim)) {
    std::string dims;
    for (int d : cuda::compiled_head_dims()) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw Error(ErrorCode::unsupported,
                std::string("cuda forward: expected dtype f16 or bf16 and head_dim in {") + dims +
                    "} (FASTATTN_CUDA_HEAD_DIMS of this build), got dtype " + to_string(p.dtype) +
                    " and head_dim " + std::to_string(p.head_dim));
  }
  // Path (compute capability or FASTATTN_CUDA_PATH: forward_path.hpp), kernel (main or 16-row
  // short-query) and split-KV count: flash_fwd/heuristics.hpp.
  cuda::ForwardPlan plan = cuda::forward_plan(p);
  if (plan.path != cuda::ForwardPath::sm80 && plan.path != cuda::ForwardPath::sm90) {
    const std::string path = cuda::to_string(plan.path);
    const std::string arch = plan.path == cuda::ForwardPath::sm75 ? "Turing" : "Volta";
    if (!cuda::path_supports(plan.path, p.dtype == DType::bf16, p.head_dim)) {
      throw Error(ErrorCode::unsupported,
                  "cuda forward: the " + path + " path (" + arch + ") expected dtype f16" +
                      (plan.path == cuda::ForwardPath::sm70 ? " and head_dim <= 128" : "") + ", got dtype " +
                      to_string(p.dtype) + " and head_dim " + std::to_string(p.head_dim) +
                      (p.dtype == DType::bf16 ? " (bf16 MMAs need sm80)" : ""));
    }
  }
  require_path_code("cuda forward", plan.path, p.device.index);
  KernelChoice c;
  c.backend = Backend::cuda;
  c.isa = cuda::to_string(plan.path);
  c.kernel = std::string("cuda.forward.") + c.isa + "." + to_string(p.dtype) + ".d" + std::to_string(p.head_dim) +
             (plan.query_group > 1 ? ".gqa" + std::to_string(plan.query_group) : "") +
             (plan.short_query ? ".q16" : "") +
             (plan.num_splits > 1 ? ".splitkv" + std::to_string(plan.num_splits) : "");
  c.block_q = plan.blocks.block_m;
  c.block_k = plan.blocks.block_n;
  c.num_threads = plan.blocks.threads;
  c.workspace_bytes = plan.workspace_bytes;
  c.reason = cuda::describe_plan(plan);
  if (plan_out != nullptr) *plan_out = std::move(plan);  // the backend runs it (no copy of its strings)
  return c;
#else
  (void)plan_out;
  const char* dir = direction == Direction::forward ? "forward" : "backward";
  throw Error(ErrorCode::unsupported, std::string("cuda ") + dir +
                                          ": this build of fastattn has no CUDA backend (dtype " +
                                          to_string(p.dtype) + ", head_dim " +
                                          std::to_string(p.head_dim) + ")");
#endif
}

}  // namespace

cpu::Isa cpu_isa_for(DType dtype) {
  cpu::Isa isa = cpu::selected_isa();
  if ((isa == cpu::Isa::avx512bf16 || isa == cpu::Isa::amx) && dtype != DType::bf16) isa = cpu::Isa::avx512;
  return isa;
}

KernelChoice choose_kernel(const AttentionProblem& p, Direction direction, Backend requested,
                           cuda::ForwardPlan* cuda_forward_plan, cpu::CpuKernelPlan* cpu_plan) {
  const char* dir = direction == Direction::forward ? "forward" : "backward";
  KernelChoice c;
  c.backend = resolve_backend(p, requested);

  if (c.backend == Backend::reference) {
    c.kernel = std::string("reference.") + dir + ".f64";
    c.isa = "scalar";
    c.num_threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
    c.reason = "requested: float64 oracle, materialises seqlen_q x seqlen_k scores";
    return c;
  }

  if (c.backend == Backend::cuda) return choose_cuda_kernel(p, direction, cuda_forward_plan);

  // CPU.
  cpu::Isa isa = cpu_isa_for(p.dtype);
  // AMX: the bf16 forward and backward have kernels (Isa::amx); everything else runs avx512bf16's.
  std::string amx_note;
  const cpu::amx::AmxMode amx = direction == Direction::forward
                                    ? cpu::forward_amx_mode(isa, p.dtype, p.head_dim, &amx_note)
                                    : cpu::backward_amx_mode(isa, p.dtype, &amx_note);
  if (isa == cpu::Isa::amx && amx != cpu::amx::AmxMode::native) isa = cpu::Isa::avx512bf16;
  if (isa == cpu::Isa::none) {
    throw Error(ErrorCode::unsupported,
                std::string("cpu ") + dir + ": expected a CPU with AVX2 and FMA (or AVX-512), " +
                    "got neither; use options.backend = reference for a slow exact answer");
  }
  const Tiles t = direction == Direction::forward ? cpu_forward_tiles(isa, p.dtype, p.head_dim)
                                                  : cpu_backward_tiles(isa, p.dtype, p.head_dim);
  c.isa = cpu::to_string(isa);
  c.block_q = t.block_q;
  c.block_k = t.block_k;
  c.num_threads = p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
  if (direction == Direction::backward && amx != cpu::amx::AmxMode::off) {
    c.block_q = kAmxBackwardTiles.block_q;
    c.block_k = kAmxBackwardTiles.block_k;
  }
  // The AMX forward's 384-row units leave the last wave idle when a thread gets only a few of
  // them (b1 h8 s2048 on 16 threads: 48 units of 384 and 128 rows, 89% balance): under 4 units
  // per thread, units of one 96-row sub-block (176 there, 97%). The price: the sub-blocks of a
  // 384-row unit share each K/V tile in L2, a 96-row unit streams its head's K/V from L3 alone
  // (1 MiB at s2048 d128 bf16; ~44 GB/s over all cores at 4 ms a call).
  if (direction == Direction::forward && isa == cpu::Isa::amx && amx != cpu::amx::AmxMode::off &&
      !p.is_varlen()) {
    const std::int64_t units = p.batch * p.num_heads * ((p.seqlen_q + c.block_q - 1) / c.block_q);
    if (units < 4 * static_cast<std::int64_t>(c.num_threads)) c.block_q = 96;
  }
  // (read even when AMX runs, so that a bad FASTATTN_CPU_BF16_DOT is an error either way)
  cpu::Bf16Dot dot = direction == Direction::forward ? cpu::forward_bf16_dot(isa, p.dtype) : cpu::Bf16Dot::off;
  if (amx != cpu::amx::AmxMode::off) dot = cpu::Bf16Dot::off;
  // What cpu::forward / cpu::backward run (the decode route below: its plan and ISA instead).
  cpu::CpuKernelPlan plan;
  plan.isa = isa;
  plan.dot = dot;
  plan.amx = amx;
  plan.num_threads = c.num_threads;
  std::string variant = dot == cpu::Bf16Dot::off ? "" : std::string(cpu::to_string(dot)) + ".";
  if (amx == cpu::amx::AmxMode::emulated) variant = std::string(cpu::amx::Emulated::kName) + ".";
  if (direction == Direction::forward) {
    // Short queries over a long cache: the decode kernel (cpu_backend.hpp, decode_plan).
    // Isa::amx is the decode kernel's too when it runs on AMX tiles; otherwise its AVX-512 code
    // is avx512bf16's.
    const cpu::Isa cpu_isa = cpu_isa_for(p.dtype);
    const cpu::DecodePlan decode = cpu::decode_plan(p, cpu_isa, c.num_threads);
    if (decode.use) {
      const cpu::Isa decode_isa =
          cpu_isa == cpu::Isa::amx && decode.amx != cpu::amx::AmxMode::native ? cpu::Isa::avx512bf16 : cpu_isa;
      c.isa = cpu::to_string(decode_isa);
      // The form in the name (f32 tiles and native AMX tiles go without: the ISA says it).
      std::string form_name;
      switch (decode.form) {
        case cpu::DecodeForm::f32_tiles: break;
        case cpu::DecodeForm::bf16_widened: form_name = "widened."; break;
        case cpu::DecodeForm::bf16_dot: form_name = "dot."; break;
        case cpu::DecodeForm::bf16_pairs: form_name = "bf16dot-emulated."; break;
        case cpu::DecodeForm::amx:
          if (decode.amx == cpu::amx::AmxMode::emulated) form_name = std::string(cpu::amx::Emulated::kName) + ".";
          break;
      }
      c.kernel = "cpu.decode." + c.isa + "." + form_name + to_string(p.dtype) + ".d" + std::to_string(p.head_dim) +
                 ".gqa" + std::to_string(p.group_size()) + ".split" + std::to_string(decode.splits);
      c.block_q = static_cast<int>(decode.rows);
      c.block_k = static_cast<int>(decode.block_k);
      c.reason = decode.reason;
      plan.decode = decode;
      plan.isa = decode_isa;
      plan.dot = cpu::Bf16Dot::off;
      plan.amx = cpu::amx::AmxMode::off;
      if (cpu_plan != nullptr) *cpu_plan = plan;
      return c;
    }
  }
  c.kernel = std::string("cpu.") + dir + "." + c.isa + "." + variant + to_string(p.dtype) + ".d" +
             std::to_string(p.head_dim);
  c.reason = direction == Direction::forward
                 ? "widest ISA on this CPU; threads over (batch, head, query block)"
                 : "widest ISA on this CPU; threads over (batch, kv head, key block)";
  if (direction == Direction::forward && isa == cpu::Isa::avx512bf16 && p.dtype == DType::bf16 &&
      amx == cpu::amx::AmxMode::off) {
    const double ratio = cpu::bf16_dot_speed_ratio();
    c.reason += dot == cpu::Bf16Dot::native ? "; bf16 pairs on vdpbf16ps" : "; f32 kernel";
    c.reason += fmt_ratio(ratio);
  }
  if (!amx_note.empty()) c.reason += "; " + amx_note;
  if (dot == cpu::Bf16Dot::emulated) {
    c.reason += "; bf16-pair kernel with the dot product emulated (FASTATTN_CPU_BF16_DOT=emulated, a test path)";
  }
  plan.block_q = c.block_q;
  plan.block_k = c.block_k;
  if (direction == Direction::backward) c.workspace_bytes = cpu::backward_workspace_bytes(p, plan);
  if (cpu_plan != nullptr) *cpu_plan = plan;
  return c;
}

}  // namespace fastattn
