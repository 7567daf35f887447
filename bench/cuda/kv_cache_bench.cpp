// kv_cache_bench.cpp — issue 17's decode measurements on CUDA, one JSON object per line:
//
//   fastattn_kv_cache_bench [decode] [paged] [multitoken] [--max-seconds S]
//
//   decode      forward() on a contiguous cache, one query token, causal (bottom-right: every key
//               visible), bf16, d128: heads 32/8, 32/32, 64/8; batch 1, 16, 64; kv 4k, 32k, 128k
//               (K+V up to kMaxKvBytes; larger shapes are "skipped" rows). GB/s of K+V.
//   paged       the KV-cache kernel (kv_cache_forward, internal level) on one cache filled to
//               the end, contiguous and paged with page sizes 1, 16, 64, 256 (pages shuffled
//               through the block table): GQA 32/8, (b16, kv 32k) and (b1, kv 128k)
//   multitoken  forward(), seqlen_q 1, 2, 4, 8, 16, causal, b8 kv 8k, GQA 32/8
//   decode2     the decode rows again (field "repeat": 2), for the run-to-run spread
//   decode_hm   the decode rows (tag kv_decode_hm) on K/V stored head-major, [b, hkv, sk, d]
//               passed as a strided view: the memory order the anchor's SDPA tensors have
//   loads       the KV-cache kernel with TMA and with cp.async loads forced (tag kv_loads; shapes
//               TMA serves): contiguous (default and deep ring), page sizes 64 and 256; GQA 32/8
//               b16 kv 32k, b1 kv 128k, b1 kv 32k; MHA b16 kv 128k
//   graph       the b1 decode rows (kv 4k, 32k, 128k; GQA 32/8, MHA, GQA 64/8) on the KV-cache
//               kernel as a plan's run, 20 runs captured in one CUDA graph, time per run (tag
//               kv_graph; sdpa_anchor.py kv_decode_graph times SDPA the same way)
//   floor       the floor under one call: an empty kernel between the events (b1's grid, with and
//               without the ring's shared memory, after a memset node), then forward() on b1
//               GQA 32/8 with kv 64 (one tile, no split), 1k (16 splits of one tile) and 4k
//               (tag kv_floor)
//   decode_cpasync the decode rows with FASTATTN_CUDA_KV_LOAD=cp_async (tag kv_decode_cpasync)
//   paged_ordered the paged rows at page sizes 1, 16, 64 with the pages in order (tag
//               kv_paged_ordered): the cost of pages scattered through the pool, apart
//   one_b1      the decode row b1 kv 32k GQA 32/8 alone (ncu: the kernel's own time)
//   paged_deep  the paged rows (tag kv_paged_deep) with the 16-row tile's deep 5-stage ring
//   paged_splits the paged rows (tag kv_paged_splits) with the contiguous cache's split counts
//               forced (one CTA per SM: b16 1 split, b1 16), against the paged heuristic's two
//   stages      the 16-row tile's default 3-stage ring against the deep 5-stage one (one CTA per SM)
//   one         the decode row b16 kv 32k GQA 32/8 alone (for ncu's DRAM byte count)
//   one_gqa8    the decode row b1 kv 128k GQA 64/8 alone (ncu: the kernels of a forward() call)
//   b1_ab       the b1 rows under the bandwidth bar (kv 32k GQA 32/8, 64/8, MHA; kv 128k 64/8):
//               default and deep ring, at the heuristic's and forced split counts (tag kv_b1_ab)
//   fwd_ab      forward() with the pool's scratch, with a caller's Workspace, and the kernel alone
//               (tag kv_fwd_ab), twice, on b1 kv 128k GQA 64/8, b1 kv 32k MHA, b1 kv 128k GQA 32/8
//   splits      the KV-cache kernel with FASTATTN_CUDA_NUM_SPLITS forced to 1..64 (and the
//               heuristic's choice) on a few decode shapes: the split heuristic's calibration
//   host        host microseconds per call of a KVCachePlan's run and of forward() (enqueue only),
//               and of an eager attention_with_kv_cache to completion: b1 and b16, kv 4k, GQA 32/8
//   combine     the fused combine (eager: a memset of its counters per call; planned: zeroed
//               once) against the combine kernel, on decode shapes that split
// and the device-to-device copy bandwidth (hbm_bandwidth.hpp) before and after, in the same
// process. Tensors are filled on the device (random bf16, never zero), so 34 GB caches take no
// host time. sdpa_anchor.py kv_decode / kv_multitoken times PyTorch on the same shapes; the rows
// join on (tag, b, sq, sk, h, hkv, d, causal). Timing: >= 30 ms of warm-up calls (the clocks
// drop while the host sets the next shape up), then cuda_timing.hpp (3 more warm-up calls, >= 20
// timed calls back to back between events, median; fewer, >= 5, past --max-seconds).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench_rows.hpp"
#include "cuda/inference/kv_cache_heuristics.hpp"
#include "cuda_timing.hpp"
#include "device_fill.hpp"
#include "fastattn/fastattn.hpp"
#include "hbm_bandwidth.hpp"
#include "kv_cache_rows.hpp"
#include "launch_floor.hpp"
#include "report_json.hpp"

namespace fastattn::bench {
namespace {

using perf::cuda::check;

// forward() over a contiguous [b, sk, hkv, d] cache, causal (bottom-right).
// head_major: K/V stored [b, hkv, sk, d] (each head's keys contiguous: the layout SDPA and the
// anchor's cuDNN rows read) and passed as a strided [b, sk, hkv, d] view, so fastattn and the
// anchor read the same bytes in the same order.
// with_workspace: the scratch from a caller's Workspace (64 MiB) instead of fastattn's pool.
void run_forward_row(const char* tag, const Shape& s, double hbm_gbs, double max_seconds, cudaStream_t stream,
                     int repeat = 1, bool head_major = false, bool with_workspace = false) {
  nlohmann::json row = shape_row(tag, s);
  if (repeat > 1) row["repeat"] = repeat;
  row["kv_layout"] = head_major ? "head_major" : "token_major";
  if (with_workspace) row["variant"] = "forward_workspace";
  if (kv_bytes(s) > kMaxKvBytes) {
    row["skipped"] = "K+V " + std::to_string(kv_bytes(s) / 1e9) + " GB over the bench's " +
                     std::to_string(kMaxKvBytes / 1e9) + " GB limit";
    emit(row);
    return;
  }
  try {
    const std::size_t e = 2;
    DeviceArray q(s.b * s.sq * s.h * s.d * e), out(s.b * s.sq * s.h * s.d * e);
    const KVSlice k = kv_slice(0, s.b * s.sk * s.hkv * s.d * e), v = kv_slice(1, s.b * s.sk * s.hkv * s.d * e);
    fill_random_bf16(q.data, q.bytes / e, 1, stream);
    fill_random_bf16(k.data, k.bytes / e, 2, stream);
    fill_random_bf16(v.data, v.bytes / e, 3, stream);
    const Device gpu = Device::cuda(0);
    const TensorView tq = make_tensor(q.data, DType::bf16, {s.b, s.sq, s.h, s.d}, gpu);
    const TensorView tk = head_major ? make_tensor(k.data, DType::bf16, {s.b, s.sk, s.hkv, s.d},
                                                   {s.hkv * s.sk * s.d, s.d, s.sk * s.d, 1}, gpu)
                                     : make_tensor(k.data, DType::bf16, {s.b, s.sk, s.hkv, s.d}, gpu);
    const TensorView tv = head_major ? make_tensor(v.data, DType::bf16, {s.b, s.sk, s.hkv, s.d},
                                                   {s.hkv * s.sk * s.d, s.d, s.sk * s.d, 1}, gpu)
                                     : make_tensor(v.data, DType::bf16, {s.b, s.sk, s.hkv, s.d}, gpu);
    const TensorView to = make_tensor(out.data, DType::bf16, {s.b, s.sq, s.h, s.d}, gpu);
    AttentionOptions o;
    o.causal = true;
    o.cuda_stream = stream;
    DeviceArray workspace_memory(with_workspace ? std::size_t{64} << 20 : 0);
    const Workspace workspace{workspace_memory.data, workspace_memory.bytes};
    if (with_workspace) o.workspace = &workspace;
    KernelChoice choice;
    const perf::cuda::EventTiming t =
        time_warm([&] { choice = forward(tq, tk, tv, to, std::nullopt, o); }, stream, max_seconds);
    add_timing(row, t, s, hbm_gbs);
    row["kernel"] = choice.kernel;
    row["reason"] = choice.reason;
  } catch (const Error& e) {
    row["error"] = e.what();
  }
  emit(row);
}

// Host time per call (issue 17: "the plan's run <= 10 us of host time"): a KVCachePlan's run
// and forward() on the same decode shape, each enqueued `calls` times back to back and timed on
// the host clock (steady_clock) before the stream is synchronised; the GPU work of a call is
// longer than its host work, so the enqueue never waits on the GPU (calls x 3 operations stay
// below the launch queue's depth). Median of 5 such loops. The eager attention_with_kv_cache
// (which reads seqlens back: a synchronisation) is timed per call to completion beside them.
void run_host_rows(const Shape& s, cudaStream_t stream) {
  constexpr int kCalls = 200;
  nlohmann::json base = shape_row("kv_host", s);
  try {
    const std::size_t e = 2;
    DeviceArray q(s.b * s.sq * s.h * s.d * e), k(s.b * s.sk * s.hkv * s.d * e), v(s.b * s.sk * s.hkv * s.d * e),
        out(s.b * s.sq * s.h * s.d * e), seqlens(s.b * 4);
    fill_random_bf16(q.data, q.bytes / e, 1, stream);
    fill_random_bf16(k.data, k.bytes / e, 2, stream);
    fill_random_bf16(v.data, v.bytes / e, 3, stream);
    const std::vector<std::int32_t> lens(static_cast<std::size_t>(s.b), static_cast<std::int32_t>(s.sk));
    check(cudaMemcpy(seqlens.data, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice), "seqlens");
    const Device gpu = Device::cuda(0);
    const TensorView tq = make_tensor(q.data, DType::bf16, {s.b, s.sq, s.h, s.d}, gpu);
    const TensorView tk = make_tensor(k.data, DType::bf16, {s.b, s.sk, s.hkv, s.d}, gpu);
    const TensorView tv = make_tensor(v.data, DType::bf16, {s.b, s.sk, s.hkv, s.d}, gpu);
    const TensorView to = make_tensor(out.data, DType::bf16, {s.b, s.sq, s.h, s.d}, gpu);
    const KVCache cache{tk, tv, make_tensor(seqlens.data, DType::i32, {s.b}, gpu), std::nullopt};
    AttentionOptions o;
    o.causal = true;
    o.cuda_stream = stream;
    const KVCachePlan plan(kv_cache_shape(tq, cache), o);
    auto host_us = [&](const std::function<void()>& fn) {
      for (int i = 0; i < 20; ++i) fn();
      check(cudaStreamSynchronize(stream), "warm-up");
      std::vector<double> us;
      for (int round = 0; round < 5; ++round) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i) fn();
        const auto t1 = std::chrono::steady_clock::now();
        check(cudaStreamSynchronize(stream), "host loop");
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const auto emit_host = [&](const char* what, double us, const std::string& kernel) {
      nlohmann::json row = base;
      row["what"] = what;
      row["host_us"] = us;
      row["kernel"] = kernel;
      emit(row);
    };
    emit_host("plan_run", host_us([&] { plan.run(tq, cache, to, std::nullopt, std::nullopt); }), plan.choice().kernel);
    KernelChoice choice;
    emit_host("forward", host_us([&] { choice = forward(tq, tk, tv, to, std::nullopt, o); }), choice.kernel);
    std::vector<double> eager;
    for (int i = 0; i < 50; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      choice = attention_with_kv_cache(tq, cache, to, std::nullopt, std::nullopt, o);
      check(cudaStreamSynchronize(stream), "eager");
      eager.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(eager.begin(), eager.end());
    emit_host("eager_to_completion", eager[eager.size() / 2], choice.kernel);
  } catch (const Error& e) {
    base["error"] = e.what();
    emit(base);
  }
}

// The floor under a one-call timing (mode floor): an empty kernel between the events, with the
// b1 decode launch's shape (16 x 8 CTAs of 128 threads), without and with the 3-stage ring's
// shared memory, and after a memset node as an eager split call has one.
void run_floor_rows(double max_seconds, cudaStream_t stream) {
  DeviceArray counters(4096);
  const int ring_smem = cuda::kv_smem_bytes(cuda::kv_row_tile(4, 128), 128, cuda::kv_stages(128));
  struct Variant {
    const char* name;
    int smem;
    bool memset;
  };
  for (const Variant& v : {Variant{"empty", 0, false}, Variant{"empty_ring_smem", ring_smem, false},
                           Variant{"memset_then_empty", ring_smem, true}}) {
    nlohmann::json row = {{"source", "fastattn"}, {"tag", "kv_floor"}, {"variant", v.name}, {"grid", "16x8"},
                          {"smem_bytes", v.smem}};
    try {
      const perf::cuda::EventTiming t = time_warm(
          [&] {
            if (v.memset) check(cudaMemsetAsync(counters.data, 0, 512, stream), "cudaMemsetAsync");
            launch_empty(16, 8, v.smem, stream);
          },
          stream, max_seconds);
      row["ms"] = t.median_ms;
      row["min_ms"] = t.min_ms;
      row["repeats"] = t.repeats;
    } catch (const Error& e) {
      row["error"] = e.what();
    }
    emit(row);
  }
}

double measure_hbm(double earlier) {
  try {
    const CopyBandwidth bw = measure_copy_bandwidth(std::size_t(2) << 30, 20);
    emit({{"source", "fastattn"}, {"kind", "hbm"}, {"copy_bytes", bw.copy_bytes}, {"counted_bytes", 2 * bw.copy_bytes},
          {"ms", bw.median_ms}, {"repeats", bw.repeats}, {"gbs", bw.gbs}});
    return std::max(earlier, bw.gbs);
  } catch (const Error& e) {
    emit({{"source", "fastattn"}, {"kind", "hbm"}, {"error", e.what()}});
    return earlier;
  }
}

int run(int argc, char** argv) {
  std::vector<std::string> modes;
  double max_seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--max-seconds" && i + 1 < argc) {
      max_seconds = std::atof(argv[++i]);
    } else {
      modes.push_back(a);
    }
  }
  if (modes.empty()) modes = {"decode", "paged", "multitoken"};
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  emit({{"source", "fastattn"}, {"kind", "device"}, {"gpu", prop.name}, {"sms", prop.multiProcessorCount},
        {"timestamp_utc", perf::utc_timestamp()}, {"fastattn_version", build_info().version},
        {"command", std::vector<std::string>(argv, argv + argc)}});
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  double hbm = measure_hbm(0);
  for (const std::string& mode : modes) {
    if (mode == "decode") {
      for (const Shape& s : decode_shapes()) run_forward_row("kv_decode", s, hbm, max_seconds, stream);
    } else if (mode == "decode2") {  // the decode rows again, after the anchors: the run-to-run spread
      for (const Shape& s : decode_shapes()) run_forward_row("kv_decode", s, hbm, max_seconds, stream, 2);
    } else if (mode == "decode_hm") {  // the decode rows on head-major K/V (the anchor's layout)
      for (const Shape& s : decode_shapes()) run_forward_row("kv_decode_hm", s, hbm, max_seconds, stream, 1, true);
    } else if (mode == "paged_splits") {  // the paged rows at the contiguous cache's split counts (one CTA per SM)
      for (const auto& [s, n] : {std::pair<Shape, int>{Shape{16, 1, 32768, 32, 8}, 1}, {Shape{1, 1, 131072, 32, 8}, 16}}) {
        setenv("FASTATTN_CUDA_NUM_SPLITS", std::to_string(n).c_str(), 1);
        reload_environment();
        for (const std::int64_t page : {0, 1, 16, 64, 256}) run_paged_row(s, page, hbm, max_seconds, stream, "kv_paged_splits");
      }
      unsetenv("FASTATTN_CUDA_NUM_SPLITS");
      reload_environment();
    } else if (mode == "paged_deep") {  // the paged rows with the 16-row tile's deep ring
      for (const Shape& s : {Shape{16, 1, 32768, 32, 8}, Shape{1, 1, 131072, 32, 8}})
        for (const std::int64_t page : {0, 1, 16, 64, 256})
          run_paged_row(s, page, hbm, max_seconds, stream, "kv_paged_deep", cuda::kv_deep_stages(128));
    } else if (mode == "stages") {  // the 16-row tile's default ring against the deep one
      for (const Shape& s : {Shape{16, 1, 32768, 32, 8}, Shape{64, 1, 4096, 32, 8}, Shape{1, 1, 131072, 32, 8},
                             Shape{1, 1, 32768, 64, 8}, Shape{16, 1, 4096, 32, 32}, Shape{16, 1, 131072, 32, 32},
                             Shape{1, 1, 4096, 32, 8}})
        for (const int stages : {cuda::kv_stages(128), cuda::kv_deep_stages(128)})
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_stages", stages);
    } else if (mode == "fwd_ab") {  // forward() (pool scratch, then a Workspace) against the kernel alone
      for (const Shape& s : {Shape{1, 1, 131072, 64, 8}, Shape{1, 1, 32768, 32, 32}, Shape{1, 1, 131072, 32, 8}})
        for (int round = 0; round < 2; ++round) {
          run_forward_row("kv_fwd_ab", s, hbm, max_seconds, stream);
          run_forward_row("kv_fwd_ab", s, hbm, max_seconds, stream, 1, false, true);
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_fwd_ab", 0, CombineRun::fused_eager);
        }
    } else if (mode == "b1_ab") {  // the b1 decode rows under the 85% bandwidth bar: deep ring, splits x2
      for (const Shape& s : {Shape{1, 1, 32768, 32, 8}, Shape{1, 1, 32768, 64, 8}, Shape{1, 1, 131072, 64, 8},
                             Shape{1, 1, 32768, 32, 32}}) {
        run_paged_row(s, 0, hbm, max_seconds, stream, "kv_b1_ab");
        run_paged_row(s, 0, hbm, max_seconds, stream, "kv_b1_ab", cuda::kv_deep_stages(128));
        for (const int n : {8, 24, 32}) {
          setenv("FASTATTN_CUDA_NUM_SPLITS", std::to_string(s.hkv == 32 ? n / 4 : n).c_str(), 1);
          reload_environment();
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_b1_ab");
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_b1_ab", cuda::kv_deep_stages(128));
        }
        unsetenv("FASTATTN_CUDA_NUM_SPLITS");
        reload_environment();
      }
    } else if (mode == "one_gqa8") {  // forward() on b1 kv 128k GQA 64/8 alone (ncu: its kernels and their times)
      run_forward_row("kv_decode", {1, 1, 131072, 64, 8}, hbm, max_seconds, stream);
    } else if (mode == "one") {  // one decode shape, for ncu (DRAM bytes against the K+V bytes)
      run_forward_row("kv_decode", {16, 1, 32768, 32, 8}, hbm, max_seconds, stream);
    } else if (mode == "floor") {  // one-call floors: empty launches, then forward() with 1 tile per CTA
      run_floor_rows(max_seconds, stream);
      for (const std::int64_t sk : {64, 1024, 4096}) run_forward_row("kv_floor", {1, 1, sk, 32, 8}, hbm, max_seconds, stream);
    } else if (mode == "graph") {  // b1 decode as a graph-replayed decode loop runs it: 20 plan runs per graph
      for (const Shape& s : decode_shapes())
        if (s.b == 1)
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_graph", 0, CombineRun::plan_default, true, std::nullopt, 20);
    } else if (mode == "loads") {  // TMA against cp.async loads, where the plan takes TMA (sm90)
      for (const Shape& s : {Shape{16, 1, 32768, 32, 8}, Shape{1, 1, 131072, 32, 8}, Shape{16, 1, 131072, 32, 32},
                             Shape{1, 1, 32768, 32, 8}})
        for (const std::int64_t page : {0, 64, 256})
          for (const cuda::KVLoad load : {cuda::KVLoad::tma, cuda::KVLoad::cp_async})
            for (const int stages : {0, cuda::kv_deep_stages(128)}) {
              if (page > 0 && stages > 0) continue;  // the paged split count counts two CTAs per SM: not the deep ring's one
              run_paged_row(s, page, hbm, max_seconds, stream, "kv_loads", stages, CombineRun::plan_default, true, load);
            }
    } else if (mode == "decode_cpasync") {  // the decode rows with FASTATTN_CUDA_KV_LOAD=cp_async
      setenv("FASTATTN_CUDA_KV_LOAD", "cp_async", 1);
      reload_environment();
      for (const Shape& s : decode_shapes()) run_forward_row("kv_decode_cpasync", s, hbm, max_seconds, stream);
      unsetenv("FASTATTN_CUDA_KV_LOAD");
      reload_environment();
    } else if (mode == "paged_ordered") {  // the paged rows with pages in order: what placement costs
      for (const Shape& s : {Shape{16, 1, 32768, 32, 8}, Shape{1, 1, 131072, 32, 8}})
        for (const std::int64_t page : {1, 16, 64})
          run_paged_row(s, page, hbm, max_seconds, stream, "kv_paged_ordered", 0, CombineRun::plan_default, false);
    } else if (mode == "one_b1") {  // forward() on b1 kv 32k GQA 32/8 alone (ncu: kernel time against the events')
      run_forward_row("kv_decode", {1, 1, 32768, 32, 8}, hbm, max_seconds, stream);
    } else if (mode == "paged") {
      for (const Shape& s : {Shape{16, 1, 32768, 32, 8}, Shape{1, 1, 131072, 32, 8}})
        for (const std::int64_t page : {0, 1, 16, 64, 256}) run_paged_row(s, page, hbm, max_seconds, stream);
    } else if (mode == "splits") {  // the split heuristic's calibration: forced counts on a contiguous cache
      for (const Shape& s : {Shape{1, 1, 131072, 32, 8}, Shape{16, 1, 32768, 32, 8}, Shape{64, 1, 4096, 32, 8},
                             Shape{16, 1, 4096, 32, 32}, Shape{1, 1, 4096, 32, 8}})
        for (const int n : {0, 1, 2, 4, 8, 16, 33, 64}) {
          if (n > 0) {
            setenv("FASTATTN_CUDA_NUM_SPLITS", std::to_string(n).c_str(), 1);
          } else {
            unsetenv("FASTATTN_CUDA_NUM_SPLITS");
          }
          reload_environment();
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_splits");
        }
      unsetenv("FASTATTN_CUDA_NUM_SPLITS");
      reload_environment();
    } else if (mode == "host") {  // host time per call: a plan's run, forward(), an eager call
      for (const Shape& s : {Shape{1, 1, 4096, 32, 8}, Shape{16, 1, 4096, 32, 8}, Shape{1, 1, 131072, 64, 8},
                             Shape{1, 1, 32768, 32, 32}})
        run_host_rows(s, stream);
    } else if (mode == "combine") {  // the fused combine against the combine kernel, on split shapes
      for (const Shape& s : {Shape{1, 1, 4096, 32, 8}, Shape{1, 1, 32768, 32, 8}, Shape{1, 1, 32768, 64, 8},
                             Shape{1, 1, 131072, 64, 8}, Shape{1, 1, 32768, 32, 32}, Shape{1, 1, 131072, 32, 32},
                             Shape{16, 1, 4096, 64, 8}})
        for (const CombineRun c : {CombineRun::separate, CombineRun::fused_eager, CombineRun::fused_planned})
          run_paged_row(s, 0, hbm, max_seconds, stream, "kv_combine", 0, c);
    } else if (mode == "multitoken") {
      for (const std::int64_t sq : {1, 2, 4, 8, 16}) run_forward_row("kv_multitoken", {8, sq, 8192, 32, 8}, hbm, max_seconds, stream);
    } else {
      std::fprintf(stderr, "kv_cache_bench: unknown mode %s (decode, decode_hm, decode_cpasync, loads, floor, graph, paged, paged_ordered, one_b1, paged_deep, paged_splits, multitoken, decode2, stages, one, one_gqa8, fwd_ab, b1_ab, splits, combine, host)\n", mode.c_str());
      return 2;
    }
  }
  hbm = measure_hbm(hbm);
  emit({{"source", "fastattn"}, {"kind", "hbm_best"}, {"gbs", hbm}});
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace fastattn::bench

int main(int argc, char** argv) {
  try {
    return fastattn::bench::run(argc, argv);
  } catch (const fastattn::Error& e) {
    fastattn::bench::emit({{"source", "fastattn"}, {"kind", "fatal"}, {"error", e.what()}});
    std::fprintf(stderr, "kv_cache_bench: %s\n", e.what());
    return 3;
  }
}
