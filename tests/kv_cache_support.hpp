// kv_cache_support.hpp — KV-cache calls (fastattn/kv_cache.hpp) judged against the float64
// oracle, shared by the CPU tests (kv_cache_test.cpp) and the GPU tests (gpu_kv_cache_test.cpp).
//
// A KVCase describes a call: per-sequence cache lengths (ragged), an optional append, a
// contiguous cache or a paged one (pages assigned in shuffled order, spare pages and block-table
// slots holding -1 that must never be read), mask, soft-cap, layouts. KVData makes its tensors:
// q, k_new, v_new random (never zero); the cache filled with NaN everywhere except the tokens it
// holds, so a read of anything else shows up as NaN; out and lse poisoned before each run.
// check_kv_case runs the call on a Place (merge_support.hpp: the host, or device mirrors) and
// judges it like harness.hpp does a forward():
//   - out and lse against reference::forward_f64 of the call gathered into a plain varlen
//     forward (inference/kv_cache_gather.hpp), with the harness rule: error <= 2 x the error of
//     the naive same-precision implementation on the same gathered problem + floor;
//   - every element written, rows that see no key out 0 and lse -inf, padding untouched;
//   - the cache after the call equal, bit for bit, to the cache before with the appended tokens
//     written at seqlens[b] .. seqlens[b] + seqlen_new - 1 through the block table, and nothing
//     else (guards included);
//   - q, append.k, append.v, seqlens and block_table bitwise unchanged.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "api/kv_cache_validate.hpp"
#include "fastattn/fastattn.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/random.hpp"
#include "harness/tensors.hpp"
#include "inference/kv_cache_gather.hpp"
#include "merge_support.hpp"
#include "reference/reference.hpp"

namespace fastattn::testing {

enum class KVLayout {
  dense,      // contiguous tensors
  strided,    // padded rows, tokens and batches, 16-byte aligned rows (what CUDA kernels take)
  unaligned,  // odd padding and an unaligned base (CPU)
};

struct KVCase {
  std::vector<std::int32_t> cache_lens = {17};  // tokens in each sequence's cache; batch = size
  std::int64_t seqlen_q = 1;
  std::int64_t num_heads = 4;
  std::int64_t num_kv_heads = 1;
  std::int64_t head_dim = 64;
  DType dtype = DType::bf16;
  std::int64_t seqlen_new = 0;  // appended tokens per sequence (0: no append)
  std::int64_t page_size = 0;   // 0: contiguous cache
  std::int64_t spare = 3;       // contiguous: capacity beyond the longest; paged: spare pages and slots
  std::int64_t slots = 0;       // paged: block-table width (0: the most pages a sequence uses, + 1 with spare)
  bool causal = true;
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  float softmax_scale = 0.0f;  // 0: default
  KVLayout layout = KVLayout::dense;
  bool with_lse = true;
  bool shuffle_pages = true;  // paged: pages in shuffled order (false: in order, adjacent in memory)
  int threads = 0;
  std::uint64_t seed = 1;

  std::int64_t batch() const { return static_cast<std::int64_t>(cache_lens.size()); }
  std::int64_t longest() const {  // the longest cache after the append
    std::int64_t n = 0;
    for (std::int32_t len : cache_lens) n = std::max<std::int64_t>(n, len + seqlen_new);
    return n;
  }
  std::int64_t pages_of(std::int64_t b) const {
    return (cache_lens[static_cast<std::size_t>(b)] + seqlen_new + page_size - 1) / page_size;
  }
  std::string to_string() const {
    std::ostringstream s;
    s << "lens=";
    for (std::size_t i = 0; i < cache_lens.size(); ++i) s << (i ? "," : "") << cache_lens[i];
    s << " sq=" << seqlen_q << " h=" << num_heads << " hkv=" << num_kv_heads << " d=" << head_dim
      << " dtype=" << fastattn::to_string(dtype) << " new=" << seqlen_new;
    if (page_size > 0) s << " page=" << page_size;
    s << (causal ? " causal" : "") << " window=(" << window_left << "," << window_right << ")";
    if (softcap > 0) s << " softcap=" << softcap;
    if (layout != KVLayout::dense) s << (layout == KVLayout::strided ? " strided" : " unaligned");
    if (!with_lse) s << " no-lse";
    if (page_size > 0 && !shuffle_pages) s << " pages-in-order";
    if (threads > 0) s << " threads=" << threads;
    s << " seed=" << seed;
    return s.str();
  }
};

// GoogleTest prints a case by its description, not its bytes.
inline void PrintTo(const KVCase& c, std::ostream* os) { *os << c.to_string(); }

// The tensors of a KVCase, on the host (a Place mirrors them elsewhere).
class KVData {
 public:
  explicit KVData(const KVCase& c) : c_(c) {
    harness::Random rng(c.seed);
    const std::int64_t b = c.batch(), sq = c.seqlen_q, h = c.num_heads, hkv = c.num_kv_heads, d = c.head_dim;
    q = make(c.dtype, {b, sq, h, d}, rng);
    out = make(c.dtype, {b, sq, h, d}, rng);
    lse = make_lse_tensor({b, h, sq}, rng);
    k_new = make(c.dtype, {b, c.seqlen_new, hkv, d}, rng);
    v_new = make(c.dtype, {b, c.seqlen_new, hkv, d}, rng);
    fill(q, rng, 1.0);
    fill(k_new, rng, 1.0);
    fill(v_new, rng, 1.0);

    // The cache: pages assigned in a shuffled order; spare pages and slots never used.
    if (c.page_size > 0) {
      max_pages_ = 0;
      std::int64_t used = 0;
      for (std::int64_t s = 0; s < b; ++s) {
        max_pages_ = std::max(max_pages_, c.pages_of(s));
        used += c.pages_of(s);
      }
      max_pages_ += c.spare > 0 ? 1 : 0;
      if (c.slots > 0) max_pages_ = c.slots;
      num_pages_ = used + c.spare;
      std::vector<std::int32_t> order(static_cast<std::size_t>(num_pages_));
      std::iota(order.begin(), order.end(), 0);
      for (std::size_t i = order.size(); c.shuffle_pages && i > 1; --i) std::swap(order[i - 1], order[static_cast<std::size_t>(rng.range(0, static_cast<std::int64_t>(i) - 1))]);
      block_table = make_index({b, max_pages_}, rng);
      std::size_t next = 0;
      for (std::int64_t s = 0; s < b; ++s) {
        for (std::int64_t slot = 0; slot < max_pages_; ++slot) {
          block_table.set(s * max_pages_ + slot, slot < c.pages_of(s) ? order[next++] : -1);
        }
      }
      k_cache = make(c.dtype, {num_pages_, c.page_size, hkv, d}, rng);
      v_cache = make(c.dtype, {num_pages_, c.page_size, hkv, d}, rng);
    } else {
      capacity_ = c.longest() + c.spare;
      k_cache = make(c.dtype, {b, capacity_, hkv, d}, rng);
      v_cache = make(c.dtype, {b, capacity_, hkv, d}, rng);
    }
    seqlens = harness::HostTensor(DType::i32, {b});
    for (std::int64_t s = 0; s < b; ++s) seqlens.set(s, c.cache_lens[static_cast<std::size_t>(s)]);
    const std::uint32_t nan = harness::guard_bits(c.dtype);
    k_cache.fill_view_bits(nan);
    v_cache.fill_view_bits(nan);
    for (std::int64_t s = 0; s < b; ++s) {
      for (std::int64_t t = 0; t < c.cache_lens[static_cast<std::size_t>(s)]; ++t) {
        for (std::int64_t e = 0; e < hkv * d; ++e) {
          k_cache.set(cache_index(s, t) + e, normal(rng, 1.0));
          v_cache.set(cache_index(s, t) + e, normal(rng, 1.0));
        }
      }
    }
  }

  const KVCase& spec() const { return c_; }

  // Logical index of element 0 of token t of sequence s in k_cache / v_cache.
  std::int64_t cache_index(std::int64_t s, std::int64_t t) const {
    const std::int64_t token = c_.num_kv_heads * c_.head_dim;
    if (c_.page_size == 0) return (s * capacity_ + t) * token;
    const std::int64_t page = static_cast<std::int64_t>(block_table.get(s * max_pages_ + t / c_.page_size));
    return (page * c_.page_size + t % c_.page_size) * token;
  }

  AttentionOptions options(Backend backend) const {
    AttentionOptions o;
    o.causal = c_.causal;
    o.window_left = c_.window_left;
    o.window_right = c_.window_right;
    o.softcap = c_.softcap;
    if (c_.softmax_scale != 0.0f) o.softmax_scale = c_.softmax_scale;
    o.backend = backend;
    o.num_threads = c_.threads;
    return o;
  }

  void poison_outputs() {
    out.fill_view_bits(harness::poison_bits(out.dtype()));
    lse.fill_view_bits(harness::poison_bits(DType::f32));
  }

  // The views of a call on `place`.
  struct Views {
    TensorView q, out;
    std::optional<TensorView> lse;
    KVCache cache;
    std::optional<KVAppend> append;
  };
  Views views(Place& place) {
    Views v;
    v.q = place.view(q);
    v.out = place.view(out);
    if (c_.with_lse) v.lse = place.view(lse);
    v.cache.k = place.view(k_cache);
    v.cache.v = place.view(v_cache);
    v.cache.seqlens = place.view(seqlens);
    if (c_.page_size > 0) v.cache.block_table = place.view(block_table);
    if (c_.seqlen_new > 0) v.append = KVAppend{place.view(k_new), place.view(v_new)};
    return v;
  }
  void copy_back(Place& place) {
    for (harness::HostTensor* t : {&q, &out, &lse, &k_cache, &v_cache, &seqlens, &block_table, &k_new, &v_new}) {
      place.copy_back(*t);
    }
  }

  // The cache as the call must leave it: bits of every element of k_cache (v_cache) with the
  // appended tokens written.
  std::vector<std::uint32_t> expected_cache(bool values) const {
    const harness::HostTensor& cache = values ? v_cache : k_cache;
    const harness::HostTensor& added = values ? v_new : k_new;
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(cache.numel()));
    for (std::int64_t i = 0; i < cache.numel(); ++i) bits[static_cast<std::size_t>(i)] = cache.bits(i);
    const std::int64_t token = c_.num_kv_heads * c_.head_dim;
    for (std::int64_t s = 0; s < c_.batch(); ++s) {
      for (std::int64_t i = 0; i < c_.seqlen_new; ++i) {
        const std::int64_t at = cache_index(s, c_.cache_lens[static_cast<std::size_t>(s)] + i);
        for (std::int64_t e = 0; e < token; ++e) bits[static_cast<std::size_t>(at + e)] = added.bits((s * c_.seqlen_new + i) * token + e);
      }
    }
    return bits;
  }

  harness::HostTensor q, out, lse, k_cache, v_cache, seqlens, block_table, k_new, v_new;

 private:
  static double normal(harness::Random& rng, double std_dev) {
    const double x = rng.normal() * std_dev;
    return x == 0.0 ? 0.5 * std_dev : x;
  }
  void fill(harness::HostTensor& t, harness::Random& rng, double std_dev) {
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      t.set(i, normal(rng, std_dev));
      if (t.get(i) == 0.0) t.set(i, 0.5 * std_dev);
    }
  }
  // [n0, n1, n2, d]: dense, or padded per layout (rows of d + pad, tokens, batches).
  harness::HostTensor make(DType dtype, const std::vector<std::int64_t>& shape, harness::Random& rng) const {
    if (c_.layout == KVLayout::dense) return harness::HostTensor(dtype, shape);
    const bool aligned = c_.layout == KVLayout::strided;
    const std::int64_t row_pad = aligned ? 8 * rng.range(1, 2) : rng.range(1, 9);
    const std::int64_t mid_pad = aligned ? 8 * rng.range(0, 1) : rng.range(0, 5);
    const std::int64_t outer_pad = aligned ? 8 * rng.range(0, 2) : rng.range(0, 7);
    const std::int64_t head = shape[3] + row_pad, token = shape[2] * head + mid_pad, outer = shape[1] * token + outer_pad;
    return harness::HostTensor(dtype, shape, {outer, token, head, 1}, aligned ? 8 : rng.range(1, 3), 5);
  }
  harness::HostTensor make_lse_tensor(const std::vector<std::int64_t>& shape, harness::Random& rng) const {
    if (c_.layout == KVLayout::dense) return harness::HostTensor(DType::f32, shape);
    const std::int64_t token = c_.layout == KVLayout::unaligned ? rng.range(1, 2) : 1;
    const std::int64_t head = shape[2] * token + rng.range(1, 5), batch = shape[1] * head + rng.range(0, 3);
    return harness::HostTensor(DType::f32, shape, {batch, head, token}, 1, 3);
  }
  harness::HostTensor make_index(const std::vector<std::int64_t>& shape, harness::Random& rng) const {
    if (c_.layout == KVLayout::dense) return harness::HostTensor(DType::i32, shape);
    return harness::HostTensor(DType::i32, shape, {shape[1] + rng.range(1, 4), 1}, 1, 3);
  }

  KVCase c_;
  std::int64_t capacity_ = 0, num_pages_ = 0, max_pages_ = 0;
};

// What a check found.
struct KVReport {
  bool pass = false;
  KernelChoice choice;
  std::string text;  // the case, the kernel, one line per finding
};

// The float64 and naive results of a call, from the host tensors as they are now (the oracle
// reads the appended tokens from k_new / v_new, so it does not matter whether they are in the
// cache yet).
struct KVOracle {
  reference::ForwardResult ref;
  harness::NaiveForward naive;
};
inline KVOracle kv_oracle(KVData& data) {
  HostPlace host;
  KVData::Views v = data.views(host);
  const KVCacheProblem p = validate_kv_cache(v.q, v.cache, v.out, v.lse, v.append, data.options(Backend::cpu));
  const GatheredKVCache g = gather_kv_cache(p);
  KVOracle o;
  o.ref = reference::forward_f64(g.problem);
  o.naive = harness::naive_forward(g.problem);
  return o;
}

// Runs `call` (the views of `data` on `place` -> the call's KernelChoice) and judges it.
inline KVReport judge_kv_call(KVData& data, Place& place, const std::function<KernelChoice(const KVData::Views&)>& call) {
  const KVCase& c = data.spec();
  KVReport r;
  std::ostringstream text;
  text << c.to_string();
  const KVOracle oracle = kv_oracle(data);
  const std::vector<std::uint32_t> k_expected = data.expected_cache(false), v_expected = data.expected_cache(true);
  const std::vector<std::uint8_t> inputs_before[] = {data.q.snapshot(), data.k_new.snapshot(), data.v_new.snapshot(),
                                                     data.seqlens.snapshot(), data.block_table.snapshot()};
  data.poison_outputs();
  try {
    r.choice = call(data.views(place));
    data.copy_back(place);
  } catch (const std::exception& e) {
    r.text = text.str() + "\n  threw: " + e.what();
    return r;
  }
  text << "\n  kernel: " << r.choice.describe();
  bool pass = true;

  // out and lse against float64, by the harness rule.
  const std::int64_t d = c.head_dim, heads = c.num_heads, total_q = c.batch() * c.seqlen_q;
  const std::vector<double> out_got = data.out.values();
  harness::TensorCheck out_check = harness::judge_tensor("out", data.out, out_got, oracle.ref.out, oracle.naive.out,
                                                         oracle.naive.out_terms, c.dtype, d, false);
  std::int64_t masked_nonzero = 0;  // rows that see no key: out exactly 0
  for (std::int64_t row = 0; row < total_q * heads; ++row) {
    const std::int64_t token = row / heads, h = row % heads;
    if (!std::isinf(oracle.ref.lse[static_cast<std::size_t>(h * total_q + token)])) continue;
    for (std::int64_t e = 0; e < d; ++e) masked_nonzero += out_got[static_cast<std::size_t>(row * d + e)] != 0.0;
  }
  out_check.masked_rows_wrong += masked_nonzero;
  out_check.pass = out_check.pass && masked_nonzero == 0;
  text << "\n  " << out_check.to_string();
  pass = pass && out_check.pass;
  if (c.with_lse) {
    const std::vector<double> logical = data.lse.values();
    std::vector<double> lse_got(logical.size());
    for (std::int64_t b = 0; b < c.batch(); ++b)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t t = 0; t < c.seqlen_q; ++t)
          lse_got[static_cast<std::size_t>(h * total_q + b * c.seqlen_q + t)] =
              logical[static_cast<std::size_t>((b * heads + h) * c.seqlen_q + t)];
    const harness::TensorCheck lse_check = harness::judge_tensor(
        "lse", data.lse, lse_got, oracle.ref.lse, oracle.naive.lse, oracle.naive.lse_terms, c.dtype, d, true);
    text << "\n  " << lse_check.to_string();
    pass = pass && lse_check.pass;
  }

  // The cache: exactly the appended tokens changed; guards untouched.
  for (const auto& [cache, expected, name] :
       {std::tuple{&data.k_cache, &k_expected, "cache.k"}, std::tuple{&data.v_cache, &v_expected, "cache.v"}}) {
    std::int64_t wrong = 0;
    for (std::int64_t i = 0; i < cache->numel(); ++i) wrong += cache->bits(i) != (*expected)[static_cast<std::size_t>(i)];
    const std::int64_t clobbered = cache->count_guard_clobbered();
    if (wrong > 0 || clobbered > 0) {
      text << "\n  " << name << ": " << wrong << " elements differ from the expected append, " << clobbered
           << " guard elements written";
      pass = false;
    }
  }
  // Inputs unchanged.
  const harness::HostTensor* inputs[] = {&data.q, &data.k_new, &data.v_new, &data.seqlens, &data.block_table};
  const char* names[] = {"q", "append.k", "append.v", "cache.seqlens", "cache.block_table"};
  for (int i = 0; i < 5; ++i) {
    if (inputs[i]->snapshot() != inputs_before[i]) {
      text << "\n  " << names[i] << " changed";
      pass = false;
    }
  }
  r.pass = pass;
  r.text = text.str();
  return r;
}

// The eager call attention_with_kv_cache.
inline KVReport check_kv_eager(const KVCase& c, Place& place) {
  KVData data(c);
  const AttentionOptions o = data.options(place.backend());
  AttentionOptions on_stream = o;
  on_stream.cuda_stream = place.stream();
  return judge_kv_call(data, place, [&](const KVData::Views& v) {
    return attention_with_kv_cache(v.q, v.cache, v.out, v.lse, v.append, on_stream);
  });
}

// A KVCachePlan for the call's shape (max_cache_len = its longest cache, as an eager call
// sizes itself), then its run.
inline KVReport check_kv_plan(const KVCase& c, Place& place) {
  KVData data(c);
  const AttentionOptions o = data.options(place.backend());
  return judge_kv_call(data, place, [&](const KVData::Views& v) {
    KVCacheShape shape = kv_cache_shape(v.q, v.cache, v.lse, v.append);
    shape.max_cache_len = c.longest();
    const KVCachePlan plan(shape, o);
    return plan.run(v.q, v.cache, v.out, v.lse, v.append, place.stream());
  });
}

}  // namespace fastattn::testing
