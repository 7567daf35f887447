// standard_attention.hpp — the baseline fastattn is measured against: "standard attention"
// as in the FastAttention and FlashAttention papers, fp32 only.
//
// Per (batch, head): the whole score matrix S = scale * Q K^T (seqlen_q x seqlen_k, fp32) is
// materialised with an OpenBLAS sgemm, masked, softmax-ed row by row, and multiplied by V with
// a second sgemm. Heads run one after another, each sgemm on all threads, so the score matrix
// of one head at a time is resident (the papers' baseline keeps all heads': same FLOPs, more
// memory). The backward pass recomputes P (like the FLOP convention, 2.5x forward: five
// sgemms) and forms dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
// dK = scale dS^T Q.
#pragma once

#include "attention_bench.hpp"
#include "cpu_features.hpp"

namespace fastattn::bench {

// OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU model when it is loaded, before
// main. A model its table does not know — e.g. a VM reporting "Intel(R) Xeon(R) Processor" —
// gets the SSE3 "Prescott" kernels, about 10x below the hardware. Returns the OPENBLAS_CORETYPE
// the CPU's features support when the loaded kernels are weaker ("SkylakeX" with AVX-512,
// "Haswell" with AVX2 + FMA), or nullptr when OpenBLAS chose well.
const char* better_openblas_coretype(const perf::CpuFeatures& cpu);
const char* openblas_corename();

// Sets the thread count of both OpenBLAS and the row loops.
void set_baseline_threads(int threads);

// Tensors as in perf::AttentionTensors ([batch, seqlen, heads, head_dim], contiguous, f32).
// Throws Error(unsupported) for non-f32 shapes or a soft-cap.
void standard_forward(const perf::BenchShape& shape, perf::AttentionTensors& t);
void standard_backward(const perf::BenchShape& shape, perf::AttentionTensors& t);

// Times the baseline like perf::run_attention_bench times fastattn (Pass::forward_backward
// is not offered: the rows of the bars use forward or backward).
perf::BenchResult run_standard_bench(const perf::BenchShape& shape, perf::Pass pass, int threads,
                                     const perf::TimingOptions& timing);

// Runs fastattn (Backend::cpu) and the baseline on a few small shapes (GQA, seqlen_q !=
// seqlen_k, causal and not) and returns the largest |baseline - fastattn| over out, dq, dk, dv
// relative to the largest |fastattn| of that tensor. bench_cpu refuses to time a baseline that
// disagrees (a wrong baseline would make every ratio meaningless).
double baseline_disagreement(int threads);

}  // namespace fastattn::bench
