// kv_cache_rows.cpp — kv_cache_bench's shared row pieces and the KV-cache kernel's row
// (kv_cache_rows.hpp says what each is).
#include "kv_cache_rows.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "cuda/inference/kv_cache_heuristics.hpp"
#include "device_fill.hpp"
#include "fastattn/fastattn.hpp"

namespace fastattn::bench {

using perf::cuda::check;

KVSlice kv_slice(int tensor, std::size_t bytes) {  // tensor 0: K, 1: V
  static void* blocks[2] = {nullptr, nullptr};
  static std::size_t block_bytes = 0;
  if (block_bytes == 0) {  // half of kMaxKvBytes each, or 45% of the free memory on a smaller GPU
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    block_bytes = std::min(static_cast<std::size_t>(kMaxKvBytes / 2) + (std::size_t{64} << 20), free / 100 * 45);
  }
  if (blocks[tensor] == nullptr) check(cudaMalloc(&blocks[tensor], block_bytes), "cudaMalloc (K/V block)");
  if (bytes > block_bytes) {
    throw Error(ErrorCode::invalid_argument, "kv_cache_bench: a K/V tensor of " + std::to_string(bytes) +
                                                 " bytes over its block of " + std::to_string(block_bytes));
  }
  return {blocks[tensor], bytes};
}

nlohmann::json shape_row(const char* tag, const Shape& s) {
  return {{"source", "fastattn"}, {"mode", tag}, {"tag", tag}, {"pass", "fwd"}, {"b", s.b}, {"sq", s.sq},
          {"sk", s.sk},           {"h", s.h},    {"hkv", s.hkv}, {"d", s.d},      {"causal", true}, {"dtype", "bf16"}};
}

std::vector<Shape> decode_shapes() {
  std::vector<Shape> shapes;
  for (const auto& [h, hkv] : {std::pair<std::int64_t, std::int64_t>{32, 8}, {32, 32}, {64, 8}})
    for (const std::int64_t b : {1, 16, 64})
      for (const std::int64_t sk : {4096, 32768, 131072}) shapes.push_back({b, 1, sk, h, hkv});
  return shapes;
}

double kv_bytes(const Shape& s) { return 4.0 * static_cast<double>(s.b * s.sk * s.hkv * s.d); }

void add_timing(nlohmann::json& row, const perf::cuda::EventTiming& t, const Shape& s, double hbm_gbs) {
  row["ms"] = t.median_ms;
  row["min_ms"] = t.min_ms;
  row["repeats"] = t.repeats;
  row["kv_bytes"] = kv_bytes(s);
  row["kv_gbs"] = kv_bytes(s) / (t.median_ms / 1e3) / 1e9;
  if (hbm_gbs > 0) row["hbm_fraction"] = kv_bytes(s) / (t.median_ms / 1e3) / 1e9 / hbm_gbs;
}

namespace {

perf::cuda::EventTimingOptions timing(double max_seconds) {
  perf::cuda::EventTimingOptions o;
  o.warmup = 3;
  o.min_repeats = 20;
  o.max_seconds = max_seconds;
  return o;
}

const char* combine_run_name(CombineRun c) {
  switch (c) {
    case CombineRun::separate: return "separate";
    case CombineRun::fused_eager: return "fused_eager";
    case CombineRun::fused_planned: return "fused_planned";
    default: return "default";
  }
}

}  // namespace

perf::cuda::EventTiming time_warm(const std::function<void()>& fn, cudaStream_t stream, double max_seconds) {
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  fn();
  check(cudaEventRecord(stop, stream), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const int calls = std::clamp(static_cast<int>(kWarmMs / std::max(ms, 1e-3f)), 3, 5000);
  for (int i = 0; i < calls; ++i) fn();
  check(cudaStreamSynchronize(stream), "warm-up");
  return perf::cuda::time_with_events(fn, stream, timing(max_seconds));
}

void run_paged_row(const Shape& s, std::int64_t page_size, double hbm_gbs, double max_seconds, cudaStream_t stream,
                   const char* tag, int stages, CombineRun combine, bool shuffled, std::optional<cuda::KVLoad> load,
                   int graph_calls) {
  nlohmann::json row = shape_row(tag, s);
  row["page_size"] = page_size;
  if (!shuffled) row["pages"] = "in order";
  try {
    const std::int64_t d = s.d, per_token = s.hkv * d;
    const bool paged = page_size > 0;
    const std::int64_t ps = paged ? page_size : s.sk;
    const std::int64_t pages_per_seq = (s.sk + ps - 1) / ps;
    const std::int64_t num_pages = s.b * pages_per_seq;
    DeviceArray q(s.b * s.sq * s.h * d * 2), out(s.b * s.sq * s.h * d * 2);
    const KVSlice k = kv_slice(0, num_pages * ps * per_token * 2), v = kv_slice(1, num_pages * ps * per_token * 2);
    DeviceArray seqlens(s.b * 4), table(num_pages * 4);
    fill_random_bf16(q.data, q.bytes / 2, 1, stream);
    fill_random_bf16(k.data, k.bytes / 2, 2, stream);
    fill_random_bf16(v.data, v.bytes / 2, 3, stream);
    const std::vector<std::int32_t> lens(static_cast<std::size_t>(s.b), static_cast<std::int32_t>(s.sk));
    check(cudaMemcpy(seqlens.data, lens.data(), seqlens.bytes, cudaMemcpyHostToDevice), "seqlens");
    std::vector<std::int32_t> pages(static_cast<std::size_t>(num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    if (shuffled) std::shuffle(pages.begin(), pages.end(), std::mt19937(7));
    check(cudaMemcpy(table.data, pages.data(), table.bytes, cudaMemcpyHostToDevice), "block table");

    KVCacheProblem p;
    AttentionProblem& a = p.attn;
    a.dtype = DType::bf16;
    a.device = Device::cuda(0);
    a.batch = s.b;
    a.num_heads = s.h;
    a.num_kv_heads = s.hkv;
    a.head_dim = d;
    a.seqlen_q = s.sq;
    a.seqlen_k = pages_per_seq * ps;
    a.total_q = s.b * s.sq;
    a.q = {q.data, {s.sq * s.h * d, s.h * d, d}};
    a.out = {out.data, {s.sq * s.h * d, s.h * d, d}};
    a.k = {k.data, {0, per_token, d}};
    a.v = {v.data, {0, per_token, d}};
    a.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
    a.window_right = 0;
    a.cuda_stream = stream;
    p.k_page_stride = p.v_page_stride = ps * per_token;
    p.page_size = ps;
    p.num_pages = num_pages;
    p.block_table = paged ? static_cast<const std::int32_t*>(table.data) : nullptr;
    p.block_table_stride = pages_per_seq;
    p.max_pages_per_seq = pages_per_seq;
    p.seqlens = static_cast<const std::int32_t*>(seqlens.data);
    cuda::KVCacheLaunch launch = cuda::kv_cache_plan(p, s.sk);
    const bool other_ring = stages > 0 && stages != launch.stages;
    const bool other_load = load && *load != launch.load;
    if (other_ring) launch.stages = stages;
    if (other_load) launch.load = *load;
    if (other_ring || other_load) cuda::kv_cache_select_kernels(p, launch);  // that kernel and its attribute
    cuda::KVScratch state = cuda::KVScratch::fresh;
    if (combine == CombineRun::separate && launch.num_splits > 1) {
      launch.combine = cuda::KVCombine::separate;
      launch.counter_bytes = 0;
    } else if (combine == CombineRun::fused_planned) {
      state = cuda::KVScratch::counters_zeroed;
    }
    DeviceArray scratch(launch.scratch_bytes);
    if (graph_calls > 0) state = cuda::KVScratch::counters_zeroed;  // a plan's run: no memset node
    if (state == cuda::KVScratch::counters_zeroed) cuda::kv_cache_zero_counters(launch, scratch.data, p.attn.device.index);
    perf::cuda::EventTiming t;
    if (graph_calls > 0) {
      // graph_calls runs captured back to back in one CUDA graph, as a decode loop replays its
      // steps; the events bracket a replay, and each time is divided by graph_calls.
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
      try {
        for (int i = 0; i < graph_calls; ++i) cuda::kv_cache_forward(p, launch, scratch.data, state);
      } catch (...) {  // end the capture, so the stream serves the next rows
        cudaStreamEndCapture(stream, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        cudaGetLastError();
        throw;
      }
      check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
      try {
        check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        t = time_warm([&] { check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch"); }, stream, max_seconds);
      } catch (...) {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        throw;
      }
      t.median_ms /= graph_calls;
      t.min_ms /= graph_calls;
      t.mean_ms /= graph_calls;
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      row["graph_calls"] = graph_calls;
    } else {
      t = time_warm([&] { cuda::kv_cache_forward(p, launch, scratch.data, state); }, stream, max_seconds);
    }
    if (combine != CombineRun::plan_default) row["combine"] = combine_run_name(combine);
    add_timing(row, t, s, hbm_gbs);
    // The plan's name and reason; a forced ring or load is in "stages" / "load" and said here.
    row["kernel"] = launch.kernel + (other_ring || other_load ? " (forced: " + std::string(cuda::kv_load_text(launch.load)) +
                                                                   ", " + std::to_string(launch.stages) + " stages)"
                                                             : std::string());
    row["reason"] = launch.reason;
    row["splits"] = launch.num_splits;
    row["stages"] = launch.stages;
    row["load"] = cuda::kv_load_text(launch.load);
  } catch (const Error& e) {
    row["error"] = e.what();
  }
  emit(row);
}

}  // namespace fastattn::bench
