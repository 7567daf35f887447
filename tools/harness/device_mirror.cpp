// device_mirror.cpp — device copies of harness tensors (see device_mirror.hpp).
#include "harness/device_mirror.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fastattn/error.hpp"

#if FASTATTN_HARNESS_CUDA
#include <cuda_runtime.h>
#endif

namespace fastattn::harness {

#if FASTATTN_HARNESS_CUDA
namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorCode::device_error, std::string("harness: ") + what + ": " + cudaGetErrorString(status));
  }
}

// One host tensor's allocation on the device.
class DeviceMirror {
 public:
  explicit DeviceMirror(HostTensor& host) : host_(host), bytes_(host.storage_bytes()) {
    check(cudaMalloc(&device_, bytes_), "cudaMalloc");
    check(cudaMemcpy(device_, host.storage(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    view_ = host.view();
    const auto offset = static_cast<const std::uint8_t*>(view_.data) - host.storage();
    view_.data = static_cast<std::uint8_t*>(device_) + offset;
    view_.device = Device::cuda(0);
  }
  ~DeviceMirror() { cudaFree(device_); }
  DeviceMirror(const DeviceMirror&) = delete;
  DeviceMirror& operator=(const DeviceMirror&) = delete;

  const TensorView& view() const { return view_; }
  // The host allocation's bytes (after copy_back), and the device copy filled with 0xFF.
  std::vector<std::uint8_t> host_bytes() const {
    const std::uint8_t* begin = host_.storage();
    return std::vector<std::uint8_t>(begin, begin + bytes_);
  }
  void poison(cudaStream_t stream) { check(cudaMemsetAsync(device_, 0xFF, bytes_, stream), "cudaMemsetAsync"); }
  void copy_back() {
    check(cudaMemcpy(host_.storage(), device_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  HostTensor& host_;
  std::size_t bytes_;
  void* device_ = nullptr;
  TensorView view_;
};

// Varlen: device copies of the offsets, and options pointing at them.
void mirror_cu_seqlens(CaseData& data, AttentionOptions& options, std::optional<DeviceMirror>& cu_q,
                       std::optional<DeviceMirror>& cu_k) {
  if (!options.cu_seqlens_q.has_value()) return;
  cu_q.emplace(data.cu_seqlens_q);
  cu_k.emplace(data.cu_seqlens_k);
  options.cu_seqlens_q = cu_q->view();
  options.cu_seqlens_k = cu_k->view();
}

}  // namespace

KernelChoice run_forward_on_device(CaseData& data, AttentionOptions options) {
  DeviceMirror q(data.q), k(data.k), v(data.v), out(data.out), lse(data.lse);
  std::optional<DeviceMirror> cu_q, cu_k;
  mirror_cu_seqlens(data, options, cu_q, cu_k);
  const KernelChoice choice = fastattn::forward(q.view(), k.view(), v.view(), out.view(), lse.view(), options);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after forward");
  out.copy_back();
  lse.copy_back();
  return choice;
}

KernelChoice run_backward_on_device(CaseData& data, AttentionOptions options) {
  DeviceMirror q(data.q), k(data.k), v(data.v), out(data.out), lse(data.lse), dout(data.dout);
  DeviceMirror dq(data.dq), dk(data.dk), dv(data.dv);
  std::optional<DeviceMirror> cu_q, cu_k;
  mirror_cu_seqlens(data, options, cu_q, cu_k);
  const KernelChoice choice = fastattn::backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(),
                                                 dq.view(), dk.view(), dv.view(), options);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after backward");
  dq.copy_back();
  dk.copy_back();
  dv.copy_back();
  // Inputs come back too, so the harness's inputs-unchanged check covers the device copies.
  for (DeviceMirror* m : {&q, &k, &v, &out, &lse, &dout}) m->copy_back();
  return choice;
}


bool graph_replay_matches_eager(CaseData& data, AttentionOptions options, std::string& detail) {
  DeviceMirror q(data.q), k(data.k), v(data.v), out(data.out), lse(data.lse), dout(data.dout);
  DeviceMirror dq(data.dq), dk(data.dk), dv(data.dv);
  std::optional<DeviceMirror> cu_q, cu_k;
  mirror_cu_seqlens(data, options, cu_q, cu_k);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  options.cuda_stream = stream;
  options.deterministic = true;
  auto calls = [&] {
    fastattn::forward(q.view(), k.view(), v.view(), out.view(), lse.view(), options);
    fastattn::backward(dout.view(), q.view(), k.view(), v.view(), out.view(), lse.view(), dq.view(), dk.view(),
                       dv.view(), options);
  };
  DeviceMirror* outputs[] = {&out, &lse, &dq, &dk, &dv};
  const char* names[] = {"out", "lse", "dq", "dk", "dv"};
  auto snapshot = [&] {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<std::vector<std::uint8_t>> bytes;
    for (DeviceMirror* m : outputs) {
      m->copy_back();
      bytes.push_back(m->host_bytes());
    }
    return bytes;
  };
  bool same = true;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  try {
    calls();
    const auto eager = snapshot();
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      calls();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    for (int replay = 0; replay < 2; ++replay) {
      for (DeviceMirror* m : outputs) m->poison(stream);
      check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
      const auto replayed = snapshot();
      for (std::size_t i = 0; i < eager.size(); ++i) {
        if (replayed[i] != eager[i]) {
          same = false;
          detail += std::string(names[i]) + " differs from the eager run in replay " + std::to_string(replay) + "; ";
        }
      }
    }
  } catch (const Error& e) {
    same = false;
    detail += e.what();
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return same;
}

#else

KernelChoice run_forward_on_device(CaseData&, AttentionOptions) {
  throw Error(ErrorCode::unsupported, "harness: this build has no CUDA backend to run on");
}

KernelChoice run_backward_on_device(CaseData&, AttentionOptions) {
  throw Error(ErrorCode::unsupported, "harness: this build has no CUDA backend to run on");
}

bool graph_replay_matches_eager(CaseData&, AttentionOptions, std::string&) {
  throw Error(ErrorCode::unsupported, "harness: this build has no CUDA backend to run on");
}

#endif

}  // namespace fastattn::harness
