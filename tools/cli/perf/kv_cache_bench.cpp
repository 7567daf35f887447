// kv_cache_bench.cpp — see kv_cache_bench.hpp.
#include "kv_cache_bench.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "common/dtype.hpp"
#include "process_memory.hpp"

namespace fastattn::perf {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Block = std::unique_ptr<void, FreeDeleter>;

// 64-byte aligned memory for `elements` of `dtype`, filled with values in [-1, 1) (touched, so
// the pages are resident before anything is timed).
Block filled_block(DType dtype, std::int64_t elements, std::uint64_t seed) {
  const std::size_t bytes = std::max<std::size_t>(64, (static_cast<std::size_t>(elements) * dtype_size(dtype) + 63) / 64 * 64);
  Block block(std::aligned_alloc(64, bytes));
  if (!block) throw Error(ErrorCode::out_of_memory, "kv-cache benchmark: could not allocate " + std::to_string(bytes) + " bytes");
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < elements; ++i) {
    std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(i);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    const float x = static_cast<float>((z ^ (z >> 31)) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    store_element(block.get(), dtype, i, x);
  }
  return block;
}

}  // namespace

BenchResult run_kv_cache_bench(const BenchShape& shape, Backend backend, int threads, const TimingOptions& timing,
                               std::uint64_t seed) {
  BenchResult r;
  r.shape = shape;
  r.pass = Pass::forward;
  r.backend = backend;
  r.threads = threads > 0 ? threads : omp_get_max_threads();
  const bool paged = shape.kv_page_size > 0;
  const std::int64_t b = shape.batch, hkv = shape.kv_heads, d = shape.head_dim, len = shape.seqlen_k;

  // q, out, lse as a forward's; the cache (and the KV bytes) as the forward's k, v unless paged.
  BenchShape dense = shape;
  if (paged) dense.seqlen_k = 0;
  AttentionTensors t(dense, false, seed);
  KVCache cache;
  std::vector<Block> blocks;
  std::vector<std::int32_t> seqlens(static_cast<std::size_t>(b), static_cast<std::int32_t>(len));
  std::vector<std::int32_t> table;
  std::int64_t cache_bytes = 0;
  if (paged) {
    const std::int64_t page = shape.kv_page_size, per_seq = (len + page - 1) / page, pages = b * per_seq;
    table.resize(static_cast<std::size_t>(pages));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), std::mt19937_64(seed));
    const std::int64_t elements = pages * page * hkv * d;
    blocks.push_back(filled_block(shape.dtype, elements, seed * 16 + 2));
    blocks.push_back(filled_block(shape.dtype, elements, seed * 16 + 3));
    cache.k = make_tensor(blocks[0].get(), shape.dtype, {pages, page, hkv, d});
    cache.v = make_tensor(blocks[1].get(), shape.dtype, {pages, page, hkv, d});
    cache.block_table = make_tensor(table.data(), DType::i32, {b, per_seq});
    cache_bytes = 2 * elements * static_cast<std::int64_t>(dtype_size(shape.dtype));
  } else {
    cache.k = t.k;
    cache.v = t.v;
  }
  cache.seqlens = make_tensor(seqlens.data(), DType::i32, {b});
  r.tensor_bytes = t.bytes() + cache_bytes;

  AttentionOptions options = options_for(shape, backend, r.threads);
  KVCacheShape planned = kv_cache_shape(t.q, cache, t.lse);
  planned.max_cache_len = len;
  const KVCachePlan plan(planned, options);

  TimingOptions rest = timing;
  rest.warmup = std::max(0, timing.warmup - 1);
  const PeakMemoryProbe memory;
  auto run = [&] { return plan.run(t.q, cache, t.out, t.lse); };
  r.kernel = run();
  r.timing = time_repeated(run, rest);
  r.peak_extra_bytes = memory.bytes();
  r.peak_exact = memory.exact();
  r.gflops = pass_flops(shape, Pass::forward) / r.timing.median_s / 1e9;
  return r;
}

}  // namespace fastattn::perf
