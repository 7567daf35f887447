// dispatch.hpp — the one place that chooses a backend and kernel for a call.
#pragma once

#include "common/problem.hpp"
#include "cpu/cpu_backend.hpp"
#include "fastattn/options.hpp"

namespace fastattn {
namespace cuda {
struct ForwardPlan;  // cuda/flash_fwd/heuristics.hpp
}

enum class Direction { forward, backward };

// Chooses the backend, kernel, ISA and tiles for a validated problem, or throws
// Error(unsupported) naming what is missing. Never picks a slower path silently.
// cuda_forward_plan, cpu_plan (each may be null): receive the CUDA forward's plan, which
// cuda::forward runs, and a CPU call's plan, which cpu::forward / cpu::backward run
// (KernelChoice is their report, never read back).
KernelChoice choose_kernel(const AttentionProblem& p, Direction direction, Backend requested,
                           cuda::ForwardPlan* cuda_forward_plan = nullptr, cpu::CpuKernelPlan* cpu_plan = nullptr);

// The CPU ISA for this dtype: the selected one (FASTATTN_CPU_ISA), except that the AVX-512 BF16
// and AMX kernels only pay for bf16 inputs (others run the avx512 kernels there).
cpu::Isa cpu_isa_for(DType dtype);

}  // namespace fastattn
