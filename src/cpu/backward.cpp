// backward.cpp — cpu::backward: the parallel plan of the CPU backward pass, and the choice of
// the kernel instantiation (CpuKernelPlan: the ISA and AMX mode the dispatcher chose, never
// another).
//
// Work unit = (sequence b, KV head, block of block_k keys); a "group" is one (b, KV head) with
// its group_size query heads. dQ rows of a group are touched by every unit of the group, so:
//   - owner mode: a thread takes a whole group: stages its query-side rows (q, dout, lse, D;
//     backward_kernel.hpp, role 1) into its own slot, runs its units in key order into its own
//     f32 dQ accumulator, then writes dq. Groups are handed out dynamically, biggest first.
//     Chosen when a greedy schedule of whole groups fills the threads evenly.
//   - split mode: groups run one after another. All threads stage the group's rows into the
//     one shared slot, then the group's key blocks are dealt to `nsplit` splits, each with an
//     f32 dQ partial buffer, and finally every dq row is the sum of its partials in split order.
//     Deterministic: block kb goes to split kb % nsplit (round-robin keeps causal masks
//     balanced) and split s always fills buffer s. Otherwise blocks are taken dynamically and
//     each thread adds into its own buffer.
//   - concurrent split mode, split mode's form when there are fewer groups than threads but more
//     than one (b1 h32/8: 8 groups on 16 threads): every group is staged into its own slot, then
//     the (group, split) items, ceil(threads / groups) splits per group, run in any order, split
//     s of a group taking its key blocks s, s + nsplit, ... into its own buffer, and every dq
//     row is the sum of its group's partials in split order. Fewer partial buffers to zero and
//     sum than with all threads on each group in turn (16 of the group's dQ size per group at 16
//     threads), and no barriers per group; costs one staged slot per group.
// In owner mode and in (deterministic, or concurrent) split mode every dQ row is summed in an
// order fixed by the problem and the thread count alone, so results are bitwise repeatable.
//
// Workspace (bytes), from backward_workspace_bytes:
//   4 * ( slots   * (2 * R + 2 * lines(G * seqlen_q))            staged rows
//       + buffers * lines(G * seqlen_q * head_dim) )             dQ in f32
// with G = group_size, seqlen_q the longest sequence, lines(n) = n rounded up to 16 floats and
// R = the kernels' staged_row_floats(G, seqlen_q, head_dim): lines(G * seqlen_q * head_dim) for
// the FMA kernels' f32 rows, about as much for the AMX kernels' bf16 rows and transposes;
// owner mode: slots = buffers = threads; split mode: slots = 1, buffers = nsplit = threads,
// capped so the partials stay within max(256 MiB, 2 x the f32 size of dq) (and at the number of
// key blocks); concurrent split mode: slots = groups, buffers = groups x ceil(threads / groups)
// (capped at the key blocks), when that fits the same budget (else split mode). The kernel's per-thread tiles (a few hundred KiB) come from thread_scratch.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "api/host_pool.hpp"
#include "cpu/backward_kernel.hpp"
#include "cpu/cpu_backend.hpp"
#include "fastattn/error.hpp"

namespace fastattn::cpu {
namespace {

using backward_detail::BackwardKernels;
using backward_detail::GroupRows;
using backward_detail::KvBlockUnit;

constexpr std::int64_t kStageChunk = 64;   // tokens per staging work item (split mode)
constexpr std::int64_t kReduceChunk = 64;  // dQ rows per reduction work item
constexpr std::int64_t kDefaultBlockQ = 48;
constexpr std::int64_t kDefaultBlockK = 96;
constexpr std::size_t kPartialBudgetBytes = std::size_t{256} << 20;

std::int64_t lines(std::int64_t floats) { return (floats + 15) / 16 * 16; }

struct BackwardPlan {
  int threads = 1;
  std::int64_t block_q = kDefaultBlockQ;
  std::int64_t block_k = kDefaultBlockK;
  bool split = false;          // split mode (see the file comment)
  bool concurrent = false;     // split mode with every group at once (see the file comment)
  std::int64_t group_splits = 1;  // concurrent: splits (dQ buffers) per group
  std::int64_t slots = 1;      // staged-row slots in the workspace
  std::int64_t buffers = 1;    // f32 dQ accumulators (= nsplit in split mode)
  std::int64_t rows_floats = 0;  // G * seqlen_q * head_dim, in lines: one of q / dout
  std::int64_t stat_floats = 0;  // G * seqlen_q, in lines: one of lse / D
  std::int64_t slot_floats = 0;
  std::int64_t buffer_floats = 0;
  std::vector<std::int64_t> group_order;  // owner mode: groups, most work first
  std::size_t workspace_bytes = 0;
};

std::int64_t group_work(const AttentionProblem& p, std::int64_t group) {
  const std::int64_t b = group / p.num_kv_heads;
  return p.q_len(b) * p.k_len(b);
}

// Owner mode pays off when a greedy biggest-first schedule of whole groups finishes within
// 15% of a perfect split of the work over the threads.
bool owner_mode_balances(const AttentionProblem& p, const std::vector<std::int64_t>& order,
                         int threads) {
  std::vector<double> finish(static_cast<std::size_t>(threads), 0.0);
  double total = 0.0;
  for (std::int64_t group : order) {
    const double work = static_cast<double>(group_work(p, group)) + 1.0;
    *std::min_element(finish.begin(), finish.end()) += work;
    total += work;
  }
  const double makespan = *std::max_element(finish.begin(), finish.end());
  return makespan <= 1.15 * total / threads;
}

BackwardPlan make_plan(const AttentionProblem& p, const CpuKernelPlan& choice,
                       const BackwardKernels& k) {
  BackwardPlan plan;
  plan.threads = p.num_threads > 0 ? p.num_threads
                                   : (choice.num_threads > 0 ? choice.num_threads
                                                             : omp_get_max_threads());
  plan.threads = std::max(plan.threads, 1);
  if (choice.block_q > 0) plan.block_q = choice.block_q;
  if (choice.block_k > 0) plan.block_k = choice.block_k;

  const std::int64_t groups = p.batch * p.num_kv_heads;
  plan.group_order.resize(static_cast<std::size_t>(groups));
  for (std::int64_t g = 0; g < groups; ++g) plan.group_order[static_cast<std::size_t>(g)] = g;
  std::stable_sort(plan.group_order.begin(), plan.group_order.end(),
                   [&p](std::int64_t a, std::int64_t b) {
                     return group_work(p, a) > group_work(p, b);
                   });
  plan.split = plan.threads > 1 &&
               (groups < plan.threads || !owner_mode_balances(p, plan.group_order, plan.threads));

  const std::int64_t rows = p.group_size() * p.seqlen_q;
  plan.rows_floats = k.staged_row_floats(p.group_size(), p.seqlen_q, p.head_dim);
  plan.stat_floats = lines(rows);
  plan.slot_floats = 2 * plan.rows_floats + 2 * plan.stat_floats;
  plan.buffer_floats = lines(rows * p.head_dim);
  plan.slots = plan.split ? 1 : plan.threads;
  plan.buffers = plan.threads;
  if (plan.split) {
    // No more splits than key blocks, and partials within the budget.
    const std::int64_t key_blocks = (p.seqlen_k + plan.block_k - 1) / plan.block_k;
    const std::size_t dq_bytes =
        static_cast<std::size_t>(p.total_q * p.num_heads * p.head_dim) * sizeof(float);
    const std::size_t budget = std::max(kPartialBudgetBytes, 2 * dq_bytes);
    const std::size_t buffer_bytes =
        std::max<std::size_t>(static_cast<std::size_t>(plan.buffer_floats) * sizeof(float), 1);
    const auto fit = static_cast<std::int64_t>(budget / buffer_bytes);
    plan.buffers = std::max<std::int64_t>(1, std::min({plan.buffers, key_blocks, fit}));
    // Fewer groups than threads, more than one: every group at once, ceil(threads / groups)
    // splits each, when their buffers fit the same budget.
    const std::int64_t per_group =
        std::min<std::int64_t>((plan.threads + groups - 1) / std::max<std::int64_t>(groups, 1), key_blocks);
    if (groups > 1 && groups < plan.threads && groups * per_group <= fit) {
      plan.concurrent = true;
      plan.group_splits = std::max<std::int64_t>(per_group, 1);
      plan.slots = groups;
      plan.buffers = groups * plan.group_splits;
    }
  }
  plan.workspace_bytes =
      static_cast<std::size_t>(plan.slots * plan.slot_floats + plan.buffers * plan.buffer_floats) *
      sizeof(float);
  return plan;
}

BackwardKernels kernels_for(const AttentionProblem& p, const CpuKernelPlan& choice) {
  const Isa isa = choice.isa;
  if (isa == Isa::none || static_cast<int>(isa) > static_cast<int>(detect_isa())) {
    throw Error(ErrorCode::unsupported,
                "cpu backward: expected an ISA this CPU and build run (at most " +
                    std::string(to_string(detect_isa())) + "), got " + to_string(isa));
  }
  if (choice.amx != amx::AmxMode::off && p.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, std::string("cpu backward: the AMX kernels expect bf16 inputs, got ") +
                                            to_string(p.dtype));
  }
#if FASTATTN_HAVE_AVX512 && FASTATTN_HAVE_AMX
  if (choice.amx != amx::AmxMode::off) {
    return backward_detail::backward_kernels_amx(choice.amx == amx::AmxMode::native);
  }
#else
  if (choice.amx != amx::AmxMode::off) {
    throw Error(ErrorCode::unsupported, "cpu backward: this build has no AMX kernels");
  }
#endif
  switch (isa) {
    case Isa::avx2:
      return backward_detail::backward_kernels_avx2();
    case Isa::avx512:
    case Isa::avx512bf16:
    case Isa::amx:  // f32 and f16 (and bf16 with FASTATTN_CPU_AMX=off): the AVX-512 kernels
#if FASTATTN_HAVE_AVX512
      return backward_detail::backward_kernels_avx512();
#else
      break;
#endif
    case Isa::none:
      break;
  }
  throw Error(ErrorCode::unsupported,
              std::string("cpu backward: no kernel for ISA ") + to_string(isa) + " in this build");
}

// Shared state of one call's parallel region. Every member function that contains a
// worksharing loop is called by all threads of the team.
struct BackwardRun {
  const AttentionProblem& p;
  const BackwardPlan& plan;
  const BackwardKernels& k;
  float* slots;    // plan.slots x plan.slot_floats: staged rows
  float* buffers;  // plan.buffers x plan.buffer_floats: f32 dQ accumulators

  GroupRows rows(std::int64_t slot, std::int64_t b) const {
    float* base = slots + slot * plan.slot_floats;
    GroupRows r;
    r.q = base;
    r.dout = r.q + plan.rows_floats;
    r.lse = r.dout + plan.rows_floats;
    r.delta = r.lse + plan.stat_floats;
    r.len_q = p.q_len(b);
    return r;
  }

  float* buffer(std::int64_t i) const { return buffers + i * plan.buffer_floats; }

  void zero_buffer(float* acc, std::int64_t b) const {
    const std::int64_t floats = p.group_size() * p.q_len(b) * p.head_dim;
    if (floats > 0) std::memset(acc, 0, static_cast<std::size_t>(floats) * sizeof(float));
  }

  KvBlockUnit unit(std::int64_t group, std::int64_t kb, const GroupRows& r, float* dq,
                   float* scratch) const {
    KvBlockUnit u;
    u.b = group / p.num_kv_heads;
    u.kv_head = group % p.num_kv_heads;
    u.k0 = kb * plan.block_k;
    u.block_q = plan.block_q;
    u.block_k = plan.block_k;
    u.rows = r;
    u.dq = dq;
    u.scratch = scratch;
    return u;
  }

  std::int64_t key_blocks(std::int64_t b) const {
    return (p.k_len(b) + plan.block_k - 1) / plan.block_k;
  }

  // Owner mode: whole groups per thread.
  void owner_groups(float* scratch) const {
    const int thread = omp_get_thread_num();
    float* acc = buffer(thread);
    const std::int64_t groups = static_cast<std::int64_t>(plan.group_order.size());
#pragma omp for schedule(dynamic)
    for (std::int64_t i = 0; i < groups; ++i) {
      const std::int64_t group = plan.group_order[static_cast<std::size_t>(i)];
      const std::int64_t b = group / p.num_kv_heads;
      const std::int64_t kv_head = group % p.num_kv_heads;
      const GroupRows r = rows(thread, b);
      k.stage_rows(p, b, kv_head, 0, r.len_q, r);
      zero_buffer(acc, b);
      for (std::int64_t kb = 0; kb < key_blocks(b); ++kb) {
        k.kv_block(p, unit(group, kb, r, acc, scratch));
      }
      for (std::int64_t g = 0; g < p.group_size(); ++g) {
        k.store_dq(p, b, kv_head * p.group_size() + g, 0, r.len_q,
                   acc + g * r.len_q * p.head_dim, 1, 0);
      }
    }
  }

  // Concurrent split mode: every group at once, plan.group_splits splits each; group i's split s
  // fills buffer i * group_splits + s with key blocks s, s + group_splits, ... in order.
  void concurrent_groups(float* scratch) const {
    const std::int64_t groups = p.batch * p.num_kv_heads;
    const std::int64_t nsplit = plan.group_splits;
    const std::int64_t stage_chunks = (p.seqlen_q + kStageChunk - 1) / kStageChunk;
#pragma omp for schedule(dynamic)
    for (std::int64_t item = 0; item < groups * stage_chunks; ++item) {
      const std::int64_t group = item / stage_chunks;
      const std::int64_t b = group / p.num_kv_heads;
      const GroupRows r = rows(group, b);
      const std::int64_t t0 = item % stage_chunks * kStageChunk;
      if (t0 >= r.len_q) continue;
      k.stage_rows(p, b, group % p.num_kv_heads, t0, std::min(r.len_q, t0 + kStageChunk), r);
    }
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < groups * nsplit; ++item) {
      const std::int64_t group = item / nsplit;
      const std::int64_t b = group / p.num_kv_heads;
      const GroupRows r = rows(group, b);
      float* acc = buffer(item);
      zero_buffer(acc, b);
      for (std::int64_t kb = item % nsplit; kb < key_blocks(b); kb += nsplit) {
        k.kv_block(p, unit(group, kb, r, acc, scratch));
      }
    }
    const std::int64_t row_chunks = (p.seqlen_q + kReduceChunk - 1) / kReduceChunk;
    const std::int64_t per_group = p.group_size() * row_chunks;
#pragma omp for schedule(dynamic)
    for (std::int64_t item = 0; item < groups * per_group; ++item) {
      const std::int64_t group = item / per_group;
      const std::int64_t b = group / p.num_kv_heads;
      const std::int64_t len_q = p.q_len(b);
      const std::int64_t g = item % per_group / row_chunks;
      const std::int64_t t0 = item % row_chunks * kReduceChunk;
      if (t0 >= len_q) continue;
      float* first = buffer(group * nsplit) + (g * len_q + t0) * p.head_dim;
      k.store_dq(p, b, group % p.num_kv_heads * p.group_size() + g, t0, std::min(len_q, t0 + kReduceChunk),
                 first, nsplit, plan.buffer_floats);
    }
  }

  // Split mode: one group at a time, all threads on it.
  void split_groups(float* scratch) const {
    const std::int64_t nsplit = plan.buffers;
    for (std::int64_t group = 0; group < p.batch * p.num_kv_heads; ++group) {
      const std::int64_t b = group / p.num_kv_heads;
      const std::int64_t kv_head = group % p.num_kv_heads;
      const GroupRows r = rows(0, b);
      const std::int64_t chunks = (r.len_q + kStageChunk - 1) / kStageChunk;
#pragma omp for schedule(static)
      for (std::int64_t c = 0; c < chunks; ++c) {
        k.stage_rows(p, b, kv_head, c * kStageChunk, std::min(r.len_q, (c + 1) * kStageChunk), r);
      }
      const std::int64_t blocks = key_blocks(b);
      if (p.deterministic || omp_get_num_threads() > nsplit) {
#pragma omp for schedule(static, 1)
        for (std::int64_t split = 0; split < nsplit; ++split) {
          float* acc = buffer(split);
          zero_buffer(acc, b);
          for (std::int64_t kb = split; kb < blocks; kb += nsplit) {
            k.kv_block(p, unit(group, kb, r, acc, scratch));
          }
        }
      } else {  // every thread has a buffer: take blocks as threads free up
#pragma omp for schedule(static)
        for (std::int64_t split = 0; split < nsplit; ++split) zero_buffer(buffer(split), b);
#pragma omp for schedule(dynamic, 1)
        for (std::int64_t kb = 0; kb < blocks; ++kb) {
          k.kv_block(p, unit(group, kb, r, buffer(omp_get_thread_num()), scratch));
        }
      }
      const std::int64_t row_chunks = (r.len_q + kReduceChunk - 1) / kReduceChunk;
#pragma omp for schedule(static)
      for (std::int64_t item = 0; item < p.group_size() * row_chunks; ++item) {
        const std::int64_t g = item / row_chunks;
        const std::int64_t t0 = item % row_chunks * kReduceChunk;
        const std::int64_t t1 = std::min(r.len_q, t0 + kReduceChunk);
        float* first = buffer(0) + (g * r.len_q + t0) * p.head_dim;
        k.store_dq(p, b, kv_head * p.group_size() + g, t0, t1, first, nsplit, plan.buffer_floats);
      }
    }
  }
};

}  // namespace

amx::AmxMode backward_amx_mode(Isa isa, DType dtype, std::string* why) {
  std::string note;
  const amx::AmxMode mode = [&] {
    if (dtype != DType::bf16 || isa == Isa::none) return amx::AmxMode::off;
    const amx::AmxMode requested = amx::amx_mode();  // throws on a bad value
    if (requested == amx::AmxMode::off) {
      note = amx::amx_mode_from_environment() ? "f32 FMA products (FASTATTN_CPU_AMX=off)"
                                              : std::string("f32 FMA products (no AMX: ") +
                                                    amx::amx_unavailable_reason() + ")";
      return amx::AmxMode::off;
    }
    if (requested == amx::AmxMode::native && isa != Isa::amx) {
      if (amx::amx_mode_from_environment()) {  // as the forward (forward_amx_mode)
        throw Error(ErrorCode::unsupported,
                    std::string("FASTATTN_CPU_AMX=native: expected the CPU ISA amx, got ") + to_string(isa) +
                        " (FASTATTN_CPU_ISA caps it)");
      }
      note = std::string("f32 FMA products (ISA capped at ") + to_string(isa) + ", below amx)";
      return amx::AmxMode::off;
    }
    if (static_cast<int>(isa) < static_cast<int>(Isa::avx512) || !amx::amx_compiled()) {
      note = std::string("f32 FMA products (the AMX backward needs ISA avx512 and a build with the AMX kernels; got ") +
             to_string(isa) + (amx::amx_compiled() ? ")" : ", no AMX kernels)");
      return amx::AmxMode::off;
    }
    note = "bf16 products on AMX tiles, f32 accumulation, P and dS rounded to bf16";
    if (requested == amx::AmxMode::emulated) note += " (tiles emulated: FASTATTN_CPU_AMX=emulated, a test path)";
    return requested;
  }();
  if (why) *why = note;
  return mode;
}

std::size_t backward_workspace_bytes(const AttentionProblem& p, const CpuKernelPlan& choice) {
  if (p.batch == 0 || p.num_heads == 0 || (p.total_q == 0 && p.total_k == 0)) return 0;
  return make_plan(p, choice, kernels_for(p, choice)).workspace_bytes;
}

void backward(const AttentionProblem& p, const CpuKernelPlan& choice) {
  const BackwardKernels k = kernels_for(p, choice);
  if (p.batch == 0 || p.num_heads == 0 || (p.total_q == 0 && p.total_k == 0)) return;
  const BackwardPlan plan = make_plan(p, choice, k);
  HostScratch workspace(p.workspace, plan.workspace_bytes);
  float* base = static_cast<float*>(workspace.data());
  const BackwardRun run{p, plan, k, base, base + plan.slots * plan.slot_floats};
  const std::size_t scratch_bytes = k.scratch_bytes(p.head_dim, plan.block_q, plan.block_k);

  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(plan.threads)
  {
    float* scratch = nullptr;
    try {
      scratch = static_cast<float*>(thread_scratch(scratch_bytes));
    } catch (...) {
#pragma omp critical(fastattn_backward_error)
      if (!error) error = std::current_exception();
      failed = true;
    }
#pragma omp barrier
    // Every thread sees the same flag here, so all skip or all enter the worksharing loops.
    if (!failed.load()) {
      if (plan.concurrent) {
        run.concurrent_groups(scratch);
      } else if (plan.split) {
        run.split_groups(scratch);
      } else {
        run.owner_groups(scratch);
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace fastattn::cpu
