// attention.cpp — the public entry points: validate, choose, run.
#include "fastattn/attention.hpp"

#include <string>

#include "api/device_memory.hpp"
#include "api/dispatch.hpp"
#include "api/validate.hpp"
#include "cpu/cpu_backend.hpp"
#include "fastattn/version.hpp"
#include "reference/reference.hpp"
#if FASTATTN_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif

namespace fastattn {
namespace {

// Dispatch, then memory-capped mode (fastattn/memory.hpp): a CUDA call reports the device
// memory it needs and throws over the limit, before anything is allocated or launched. The
// CPU backends leave device_memory_bytes 0 and ignore the limit.
KernelChoice choose(const AttentionProblem& p, Direction direction, const AttentionOptions& options,
                    cuda::ForwardPlan* cuda_forward_plan = nullptr, cpu::CpuKernelPlan* cpu_plan = nullptr) {
  KernelChoice c = choose_kernel(p, direction, options.backend, cuda_forward_plan, cpu_plan);
  if (c.backend != Backend::cuda) return c;
  const DeviceMemoryNeed need = device_memory_need(p, direction, c.workspace_bytes);
  c.device_memory_bytes = need.total();
  check_device_memory(direction == Direction::forward ? "cuda forward" : "cuda backward", need,
                      effective_device_memory_limit(options.device_memory_limit_bytes));
  return c;
}

}  // namespace

KernelChoice plan_forward(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const std::optional<TensorView>& lse,
                          const AttentionOptions& options) {
  const AttentionProblem p = validate_forward(q, k, v, out, lse, options);
  return choose(p, Direction::forward, options);
}

KernelChoice forward(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const std::optional<TensorView>& lse,
                     const AttentionOptions& options) {
  const AttentionProblem p = validate_forward(q, k, v, out, lse, options);
  cpu::CpuKernelPlan cpu_plan;  // planned once, by the dispatcher; run as is (as the CUDA plan)
#if FASTATTN_HAVE_CUDA
  cuda::ForwardPlan cuda_plan;
  const KernelChoice choice = choose(p, Direction::forward, options, &cuda_plan, &cpu_plan);
#else
  const KernelChoice choice = choose(p, Direction::forward, options, nullptr, &cpu_plan);
#endif
  if (p.total_q == 0) return choice;  // nothing to write
  switch (choice.backend) {
    case Backend::reference: reference::forward(p); break;
    case Backend::cpu: cpu::forward(p, cpu_plan); break;
#if FASTATTN_HAVE_CUDA
    case Backend::cuda: cuda::forward(p, cuda_plan); break;
#endif
    default: throw Error(ErrorCode::internal, "forward: dispatcher chose an unbuilt backend");
  }
  return choice;
}

KernelChoice plan_backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                           const TensorView& v, const TensorView& out, const TensorView& lse,
                           const TensorView& dq, const TensorView& dk, const TensorView& dv,
                           const AttentionOptions& options) {
  const AttentionProblem p = validate_backward(dout, q, k, v, out, lse, dq, dk, dv, options);
  return choose(p, Direction::backward, options);
}

KernelChoice backward(const TensorView& dout, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& out, const TensorView& lse,
                      const TensorView& dq, const TensorView& dk, const TensorView& dv,
                      const AttentionOptions& options) {
  const AttentionProblem p = validate_backward(dout, q, k, v, out, lse, dq, dk, dv, options);
  cpu::CpuKernelPlan cpu_plan;
  const KernelChoice choice = choose(p, Direction::backward, options, nullptr, &cpu_plan);
  if (p.total_q == 0 && p.total_k == 0) return choice;
  switch (choice.backend) {
    case Backend::reference: reference::backward(p); break;
    case Backend::cpu: cpu::backward(p, cpu_plan); break;
#if FASTATTN_HAVE_CUDA
    case Backend::cuda: cuda::backward(p, choice); break;
#endif
    default: throw Error(ErrorCode::internal, "backward: dispatcher chose an unbuilt backend");
  }
  return choice;
}

BuildInfo build_info() {
  BuildInfo info;
  info.version = FASTATTN_VERSION_STRING;
  info.cuda_compiled = FASTATTN_HAVE_CUDA;
  for (cpu::Isa isa : cpu::compiled_isas()) info.cpu_isas_compiled.push_back(cpu::to_string(isa));
  info.cpu_isa_selected = cpu::to_string(cpu::selected_isa());
#if FASTATTN_HAVE_CUDA
  info.cuda_archs_compiled = cuda::compiled_archs();
  info.cuda_head_dims = cuda::compiled_head_dims();
  for (cuda::ForwardPath path :
       {cuda::ForwardPath::sm90, cuda::ForwardPath::sm80, cuda::ForwardPath::sm75, cuda::ForwardPath::sm70}) {
    if (cuda::path_compiled(path)) info.cuda_paths_compiled.push_back(cuda::to_string(path));
  }
  for (const cuda::DeviceInfo& d : cuda::devices()) {
    info.cuda_devices.push_back("cuda:" + std::to_string(d.ordinal) + " " + d.name + " (sm" +
                                std::to_string(d.compute_capability) + ", " +
                                std::to_string(d.multiprocessors) + " SMs)");
    std::string path;
    try {
      const cuda::ForwardPath p = cuda::forward_path(d.ordinal);
      path = cuda::to_string(p);
      if (!cuda::forward_path_request().automatic) path += " (forced by FASTATTN_CUDA_PATH)";
      if (!cuda::path_compiled(p)) {
        path += "; not in this build";
      } else if (!cuda::path_runs_on(p, d.ordinal)) {
        path += std::string("; this build's ") + cuda::to_string(p) + " code (CUDA architectures " + cuda::path_archs(p) +
                ") does not run on it";
      }
    } catch (const Error& e) {
      path = std::string("none: ") + e.what();
    }
    info.cuda_device_paths.push_back(path);
  }
#endif
  return info;
}

}  // namespace fastattn
