// cuda_forward_bench.cpp — times fastattn's CUDA forward with CUDA events (warm-up, repeats,
// median) over the FlashAttention-2 paper sweep and the bars' extra shapes; writes JSON lines.
// PyTorch SDPA's backends are timed in the same job by sdpa_anchor.py; compare.py joins them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "fastattn/fastattn.hpp"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(2);
  }
}

std::uint16_t to_bf16(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<std::uint16_t>(b >> 16);
}

struct Shape {
  int batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim;
  bool causal;
  const char* tag;
};

void* device_random(std::size_t elems, std::mt19937& rng) {
  std::vector<std::uint16_t> host(elems);
  std::normal_distribution<float> normal;
  for (auto& x : host) x = to_bf16(normal(rng));
  void* d = nullptr;
  check(cudaMalloc(&d, elems * 2), "cudaMalloc");
  check(cudaMemcpy(d, host.data(), elems * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sweep = argc > 1 ? argv[1] : "paper";
  std::vector<Shape> shapes;
  if (sweep == "paper" || sweep == "all") {
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int s : {512, 1024, 2048, 4096, 8192, 16384})
          shapes.push_back({16384 / s, s, s, 2048 / d, 2048 / d, d, causal, "paper"});
  }
  if (sweep == "short") {  // the bars' shapes, small enough for one short device call
    for (int d : {64, 128})
      for (bool causal : {false, true})
        for (int s : {2048, 8192}) shapes.push_back({16384 / s, s, s, 2048 / d, 2048 / d, d, causal, "paper"});
    shapes.push_back({1, 32768, 32768, 16, 16, 128, false, "seqpar"});
  }
  if (sweep == "extra" || sweep == "all") {
    for (int d : {64, 128}) shapes.push_back({1, 32768, 32768, 16, 16, d, false, "seqpar"});
    shapes.push_back({1, 131072, 131072, 16, 16, 128, true, "long128k"});
  }
  std::mt19937 rng(1234);
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (const Shape& s : shapes) {
    const std::size_t nq = std::size_t(s.batch) * s.seqlen_q * s.heads * s.head_dim;
    const std::size_t nk = std::size_t(s.batch) * s.seqlen_k * s.kv_heads * s.head_dim;
    void* q = device_random(nq, rng);
    void* k = device_random(nk, rng);
    void* v = device_random(nk, rng);
    void* o = nullptr;
    float* lse = nullptr;
    check(cudaMalloc(&o, nq * 2), "cudaMalloc");
    check(cudaMalloc(&lse, std::size_t(s.batch) * s.heads * s.seqlen_q * 4), "cudaMalloc");
    std::size_t free_before = 0, total = 0;
    check(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    using fastattn::DType;
    const auto dev = fastattn::Device::cuda(0);
    auto Q = fastattn::make_tensor(q, DType::bf16, {s.batch, s.seqlen_q, s.heads, s.head_dim}, dev);
    auto K = fastattn::make_tensor(k, DType::bf16, {s.batch, s.seqlen_k, s.kv_heads, s.head_dim}, dev);
    auto V = fastattn::make_tensor(v, DType::bf16, {s.batch, s.seqlen_k, s.kv_heads, s.head_dim}, dev);
    auto O = fastattn::make_tensor(o, DType::bf16, {s.batch, s.seqlen_q, s.heads, s.head_dim}, dev);
    auto L = fastattn::make_tensor(lse, DType::f32, {s.batch, s.heads, s.seqlen_q}, dev);
    fastattn::AttentionOptions opt;
    opt.causal = s.causal;
    fastattn::KernelChoice choice;
    try {
      for (int i = 0; i < 3; ++i) choice = fastattn::forward(Q, K, V, O, L, opt);
    } catch (const fastattn::Error& e) {
      std::printf("{\"tag\":\"%s\",\"error\":\"%s\"}\n", s.tag, e.what());
      continue;
    }
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<float> ms;
    for (int r = 0; r < 20; ++r) {
      check(cudaEventRecord(start), "record");
      fastattn::forward(Q, K, V, O, L, opt);
      check(cudaEventRecord(stop), "record");
      check(cudaEventSynchronize(stop), "sync");
      float t = 0;
      check(cudaEventElapsedTime(&t, start, stop), "elapsed");
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    double flops = 4.0 * s.batch * s.heads * double(s.seqlen_q) * s.seqlen_k * s.head_dim;
    if (s.causal) flops /= 2;
    std::size_t free_after = 0;
    check(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
    std::printf(
        "{\"tag\":\"%s\",\"backend\":\"fastattn\",\"b\":%d,\"s\":%d,\"h\":%d,\"d\":%d,\"causal\":%s,"
        "\"ms\":%.5f,\"tflops\":%.2f,\"kernel\":\"%s\",\"extra_device_bytes\":%lld}\n",
        s.tag, s.batch, s.seqlen_q, s.heads, s.head_dim, s.causal ? "true" : "false", med,
        flops / med / 1e9, choice.kernel.c_str(),
        static_cast<long long>(free_before) - static_cast<long long>(free_after));
    std::fflush(stdout);
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(lse);
  }
  return 0;
}
