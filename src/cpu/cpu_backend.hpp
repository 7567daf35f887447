// cpu_backend.hpp — the CPU FlashAttention-2 backend's entry points.
//
// The dispatcher (src/api/dispatch.cpp) picks the ISA and tile sizes and passes them in a
// KernelChoice; these functions run exactly that choice and never fall back to another.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/problem.hpp"
#include "fastattn/options.hpp"

namespace fastattn::cpu {

// Instruction sets the CPU kernels are compiled for, best last.
enum class Isa { none, avx2, avx512, avx512bf16 };

const char* to_string(Isa isa) noexcept;
Isa isa_from_string(const std::string& name);  // throws Error on an unknown name
Isa detect_isa();                     // best ISA this CPU and this build support
std::vector<Isa> compiled_isas();     // ISAs with kernels in this binary
// FASTATTN_CPU_ISA=avx2 (etc.) caps the ISA, for testing the narrower kernels on a wider CPU.
Isa selected_isa();

// Run the forward/backward pass of `p` with the ISA and tiles of `choice`.
void forward(const AttentionProblem& p, const KernelChoice& choice);
void backward(const AttentionProblem& p, const KernelChoice& choice);

// Scratch the backward pass needs from the workspace (dQ partial sums), in bytes.
std::size_t backward_workspace_bytes(const AttentionProblem& p, const KernelChoice& choice);

}  // namespace fastattn::cpu
