// kv_cache_validate.cpp — every check on a KV-cache call, in one place (kv_cache_validate.hpp).
//
// Messages follow the library's pattern, "<argument>: expected <what>, got <actual>", with the
// arguments named as the caller wrote them: q, cache.k, cache.v, cache.seqlens,
// cache.block_table, out, lse, append.k, append.v, options.*. Arguments are checked in that
// order, so the first bad one is the one named. Nothing is written before validation completes.
#include "api/kv_cache_validate.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <initializer_list>
#include <utility>
#include <vector>

#include "api/validate.hpp"
#include "api/view_checks.hpp"
#include "fastattn/error.hpp"

namespace fastattn {
namespace {

[[noreturn]] void fail(const std::string& arg, const std::string& expected, const std::string& actual) {
  fail_argument(arg, expected, actual);
}

std::string str(std::int64_t x) { return std::to_string(x); }

constexpr std::int64_t kMaxIndex32 = std::numeric_limits<std::int32_t>::max();

// A plan's run validates its views on every call and must not allocate (issue 17: its host time
// is the decode step's), so the checks below take their names and layouts as C strings or as
// the static strings here, build no std::string or vector on the success path, and build the
// message text only when they fail.
const std::string kQ = "q", kCacheK = "cache.k", kCacheV = "cache.v", kSeqlens = "cache.seqlens",
                  kBlockTable = "cache.block_table", kOut = "out", kLse = "lse", kAppendK = "append.k",
                  kAppendV = "append.v";

// A shape of up to 4 dimensions, by value.
struct Dims {
  std::int64_t d[4] = {0, 0, 0, 0};
  int rank = 0;
};
Dims dims(std::initializer_list<std::int64_t> shape) {
  Dims r;
  for (std::int64_t x : shape) r.d[r.rank++] = x;
  return r;
}
Dims shape_of(const TensorView& t) {
  Dims r;
  r.rank = t.rank < 4 ? t.rank : 4;
  for (int i = 0; i < r.rank; ++i) r.d[i] = t.shape[i];
  return r;
}

std::string shape_text(const Dims& shape) {
  TensorView t;
  t.rank = shape.rank;
  for (int d = 0; d < t.rank; ++d) t.shape[d] = shape.d[d];
  return t.shape_string();
}

void check_rank(const TensorView& t, const std::string& name, int rank, const char* layout) {
  if (t.rank != rank) {
    fail(name, "rank " + std::to_string(rank) + " " + layout, "rank " + std::to_string(t.rank) + " " + t.shape_string());
  }
  check_view_layout(t, name);
}

void check_dtype(const TensorView& t, const std::string& name, DType expected, const char* like) {
  if (t.dtype != expected) {
    fail(name, std::string("dtype ") + to_string(expected) + like, std::string("dtype ") + to_string(t.dtype));
  }
}

void check_device(const TensorView& t, const std::string& name, const Device& expected) {
  if (t.device != expected) fail(name, "device " + to_string(expected) + " (the device of q)", "device " + to_string(t.device));
}

void check_shape(const TensorView& t, const std::string& name, const Dims& shape, const char* like) {
  bool same = t.rank == shape.rank;
  for (int d = 0; same && d < t.rank; ++d) same = t.shape[d] == shape.d[d];
  if (!same) fail(name, "shape " + shape_text(shape) + " (" + like + ")", "shape " + t.shape_string());
}

void check_contiguous_dim(const TensorView& t, const std::string& name) {
  const int last = t.rank - 1;
  if (t.shape[last] > 1 && t.stride[last] != 1) {
    fail(name, "a contiguous last dimension (stride[" + std::to_string(last) + "] = 1)", "stride " + str(t.stride[last]));
  }
}

TokenStrides token_strides(const TensorView& t) { return {t.stride[0], t.stride[1], t.stride[2]}; }

struct Named {
  const TensorView* view = nullptr;
  const char* name = nullptr;
};

// Up to 8 named views, by value (no allocation).
struct NamedList {
  Named items[8];
  int count = 0;
  void add(const TensorView* view, const char* name) { items[count++] = {view, name}; }
};

void check_apart(const TensorView& written, const std::string& written_name, const NamedList& others) {
  for (int i = 0; i < others.count; ++i) {
    const Named& o = others.items[i];
    if (views_overlap(written, *o.view)) fail(written_name, std::string("memory that does not overlap ") + o.name, "an overlapping range");
  }
}

// The options a KV-cache call takes: forward()'s mask, scale and soft-cap (always aligned
// bottom-right), no varlen offsets (the cache carries the lengths).
void check_options(const AttentionOptions& o, std::int64_t head_dim, AttentionProblem& p) {
  if (o.cu_seqlens_q) fail("options.cu_seqlens_q", "none (a KV-cache call takes its lengths from cache.seqlens)", "a tensor");
  if (o.cu_seqlens_k) fail("options.cu_seqlens_k", "none (a KV-cache call takes its lengths from cache.seqlens)", "a tensor");
  if (o.max_seqlen_q != 0) fail("options.max_seqlen_q", "0 (not used by KV-cache calls)", str(o.max_seqlen_q));
  if (o.max_seqlen_k != 0) fail("options.max_seqlen_k", "0 (not used by KV-cache calls; see KVCacheShape::max_cache_len)", str(o.max_seqlen_k));
  if (o.alignment != MaskAlignment::bottom_right) {
    fail("options.alignment", "bottom_right (KV-cache calls align the causal mask and window to the end of the cache)", "top_left");
  }
  const float scale = o.softmax_scale.value_or(1.0f / std::sqrt(static_cast<float>(head_dim > 0 ? head_dim : 1)));
  if (!std::isfinite(scale) || scale == 0.0f) fail("options.softmax_scale", "a finite non-zero value", std::to_string(scale));
  if (!std::isfinite(o.softcap) || o.softcap < 0.0f) fail("options.softcap", "0 (off) or a finite positive value", std::to_string(o.softcap));
  if (o.window_left < -1) fail("options.window_left", ">= -1 (-1: unbounded)", str(o.window_left));
  if (o.window_right < -1) fail("options.window_right", ">= -1 (-1: unbounded)", str(o.window_right));
  if (o.causal && o.window_right > 0) fail("options.window_right", "-1 or 0 with causal", str(o.window_right));
  if (o.num_threads < 0) fail("options.num_threads", ">= 0 (0: default)", std::to_string(o.num_threads));
  if (o.workspace && o.workspace->size > 0 && o.workspace->data == nullptr) {
    fail("options.workspace", "a non-null data pointer when size > 0", "nullptr");
  }
  p.softmax_scale = scale;
  p.softcap = o.softcap;
  p.window_left = o.window_left;
  p.window_right = o.causal ? 0 : o.window_right;
  p.alignment = MaskAlignment::bottom_right;
  p.num_threads = o.num_threads;
  p.deterministic = false;
  p.cuda_stream = o.cuda_stream;
  p.workspace = o.workspace;
}

// validate_kv_cache, and kv_cache_shape (out null: no output to check).
KVCacheProblem validate(const TensorView& q, const KVCache& cache, const TensorView* out_view,
                        const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                        const AttentionOptions& options) {
  KVCacheProblem kp;
  AttentionProblem& p = kp.attn;
  const bool paged = cache.block_table.has_value();
  const char* cache_layout = paged ? "[num_pages, page_size, num_kv_heads, head_dim] (paged cache)"
                                   : "[batch, capacity, num_kv_heads, head_dim] (contiguous cache)";

  // q
  check_rank(q, kQ, 4, "[batch, seqlen_q, num_heads, head_dim]");
  if (q.dtype != DType::f32 && q.dtype != DType::f16 && q.dtype != DType::bf16) {
    fail("q", "dtype f32, f16 or bf16", std::string("dtype ") + to_string(q.dtype));
  }
  if (q.device.type == DeviceType::cuda && !FASTATTN_HAVE_CUDA) {
    throw Error(ErrorCode::unsupported, "q: expected a cpu tensor (fastattn was built without CUDA), got device " + to_string(q.device));
  }
  p.dtype = q.dtype;
  p.device = q.device;
  p.batch = q.shape[0];
  p.seqlen_q = q.shape[1];
  p.num_heads = q.shape[2];
  p.head_dim = q.shape[3];
  if (p.head_dim % 8 != 0 || p.head_dim < 8 || p.head_dim > kMaxHeadDim) {
    fail("q", "head_dim (shape[3]) a multiple of 8 in [8, " + str(kMaxHeadDim) + "]", str(p.head_dim));
  }
  if (q.stride[3] != 1) fail("q", "a contiguous head_dim (stride[3] = 1)", "stride " + str(q.stride[3]));
  if (p.num_heads < 1) fail("q", "at least one head (shape[2])", str(p.num_heads));
  if (p.num_heads > kMaxIndex32) fail("q", "num_heads <= 2^31 - 1", str(p.num_heads));
  if (p.seqlen_q > kMaxIndex32) fail("q", "seqlen_q <= 2^31 - 1", str(p.seqlen_q));

  // cache.k, cache.v
  const TensorView& k = cache.k;
  const TensorView& v = cache.v;
  check_rank(k, kCacheK, 4, cache_layout);
  check_dtype(k, kCacheK, p.dtype, " (as q)");
  check_device(k, kCacheK, p.device);
  if (k.shape[3] != p.head_dim) fail("cache.k", "head_dim shape[3] = " + str(p.head_dim) + " (as q)", str(k.shape[3]));
  if (k.stride[3] != 1) fail("cache.k", "a contiguous head_dim (stride[3] = 1)", "stride " + str(k.stride[3]));
  p.num_kv_heads = k.shape[2];
  if (p.num_kv_heads < 1) fail("cache.k", "at least one KV head (shape[2])", str(p.num_kv_heads));
  if (p.num_heads % p.num_kv_heads != 0) {
    fail("cache.k", "num_kv_heads (shape[2]) dividing q's num_heads = " + str(p.num_heads), str(p.num_kv_heads));
  }
  check_rank(v, kCacheV, 4, cache_layout);
  check_dtype(v, kCacheV, p.dtype, " (as q)");
  check_device(v, kCacheV, p.device);
  check_shape(v, kCacheV, shape_of(k), "as cache.k");
  if (v.stride[3] != 1) fail("cache.v", "a contiguous head_dim (stride[3] = 1)", "stride " + str(v.stride[3]));

  // cache.seqlens
  const TensorView& seqlens = cache.seqlens;
  check_rank(seqlens, kSeqlens, 1, "[batch]");
  check_dtype(seqlens, kSeqlens, DType::i32, "");
  check_device(seqlens, kSeqlens, p.device);
  check_shape(seqlens, kSeqlens, dims({p.batch}), "[batch] of q");
  check_contiguous_dim(seqlens, kSeqlens);

  // cache.block_table, and the cache's geometry
  kp.num_pages = k.shape[0];
  kp.page_size = k.shape[1];
  kp.k_page_stride = k.stride[0];
  kp.v_page_stride = v.stride[0];
  if (paged) {
    const TensorView& bt = *cache.block_table;
    check_rank(bt, kBlockTable, 2, "[batch, max_pages_per_seq]");
    check_dtype(bt, kBlockTable, DType::i32, "");
    check_device(bt, kBlockTable, p.device);
    if (bt.shape[0] != p.batch) fail("cache.block_table", "batch shape[0] = " + str(p.batch) + " (as q)", str(bt.shape[0]));
    check_contiguous_dim(bt, kBlockTable);
    if (kp.page_size < 1) fail("cache.k", "page_size (shape[1]) >= 1 for a paged cache", str(kp.page_size));
    kp.block_table = static_cast<const std::int32_t*>(bt.data);
    kp.block_table_stride = bt.stride[0];
    kp.max_pages_per_seq = bt.shape[1];
    if (kp.max_pages_per_seq > kMaxIndex32 / kp.page_size) {
      fail("cache.block_table", "max_pages_per_seq (shape[1]) x page_size <= 2^31 - 1 tokens per sequence",
           str(kp.max_pages_per_seq) + " x " + str(kp.page_size));
    }
  } else {
    if (k.shape[0] != p.batch) fail("cache.k", "batch shape[0] = " + str(p.batch) + " (as q) for a contiguous cache", str(k.shape[0]));
    if (kp.page_size > kMaxIndex32) fail("cache.k", "capacity (shape[1]) <= 2^31 - 1", str(kp.page_size));
    kp.max_pages_per_seq = 1;
  }
  kp.seqlens = static_cast<const std::int32_t*>(seqlens.data);
  p.seqlen_k = kp.capacity();
  p.total_q = p.batch * p.seqlen_q;
  p.total_k = kp.num_pages * kp.page_size;
  p.q = {q.data, token_strides(q)};
  p.k = {k.data, token_strides(k)};
  p.v = {v.data, token_strides(v)};

  // Everything the call reads, for the overlap checks of what it writes.
  NamedList inputs;
  inputs.add(&q, "q");
  inputs.add(&k, "cache.k");
  inputs.add(&v, "cache.v");
  inputs.add(&seqlens, "cache.seqlens");
  if (paged) inputs.add(&*cache.block_table, "cache.block_table");

  // out
  const TensorView& out = out_view ? *out_view : q;
  if (out_view) {
    check_rank(out, kOut, 4, "[batch, seqlen_q, num_heads, head_dim]");
    check_dtype(out, kOut, p.dtype, " (as q)");
    check_device(out, kOut, p.device);
    check_shape(out, kOut, shape_of(q), "as q");
    if (out.stride[3] != 1) fail("out", "a contiguous head_dim (stride[3] = 1)", "stride " + str(out.stride[3]));
    check_writable_view(out, kOut);
    p.out = {out.data, token_strides(out)};
  }

  // lse
  if (lse) {
    check_rank(*lse, kLse, 3, "[batch, num_heads, seqlen_q]");
    check_dtype(*lse, kLse, DType::f32, "");
    check_device(*lse, kLse, p.device);
    check_shape(*lse, kLse, dims({p.batch, p.num_heads, p.seqlen_q}), "[batch, num_heads, seqlen_q]");
    check_writable_view(*lse, kLse);
    p.lse = static_cast<float*>(lse->data);
    p.lse_batch_stride = lse->stride[0];
    p.lse_head_stride = lse->stride[1];
    p.lse_token_stride = lse->stride[2];
  }

  // append.k, append.v
  if (append) {
    const TensorView& k_new = append->k;
    const TensorView& v_new = append->v;
    check_rank(k_new, kAppendK, 4, "[batch, seqlen_new, num_kv_heads, head_dim]");
    check_dtype(k_new, kAppendK, p.dtype, " (as q)");
    check_device(k_new, kAppendK, p.device);
    const Dims expected = dims({p.batch, k_new.shape[1], p.num_kv_heads, p.head_dim});
    check_shape(k_new, kAppendK, expected, "[batch of q, seqlen_new, num_kv_heads and head_dim of cache.k]");
    if (k_new.stride[3] != 1) fail("append.k", "a contiguous head_dim (stride[3] = 1)", "stride " + str(k_new.stride[3]));
    check_rank(v_new, kAppendV, 4, "[batch, seqlen_new, num_kv_heads, head_dim]");
    check_dtype(v_new, kAppendV, p.dtype, " (as q)");
    check_device(v_new, kAppendV, p.device);
    check_shape(v_new, kAppendV, shape_of(k_new), "as append.k");
    if (v_new.stride[3] != 1) fail("append.v", "a contiguous head_dim (stride[3] = 1)", "stride " + str(v_new.stride[3]));
    kp.seqlen_new = k_new.shape[1];
    kp.k_new = {k_new.data, token_strides(k_new)};
    kp.v_new = {v_new.data, token_strides(v_new)};
    inputs.add(&k_new, "append.k");
    inputs.add(&v_new, "append.v");
  }

  // What the call writes: out, lse, and with an append the cache. The cache's k and v are not
  // checked against each other: interleaved layouts (k = kv[:, 0], v = kv[:, 1]) have
  // overlapping byte ranges but distinct elements.
  if (out_view) check_apart(out, kOut, inputs);
  if (lse) {
    NamedList others = inputs;
    if (out_view) others.add(&out, "out");
    check_apart(*lse, kLse, others);
  }
  if (kp.seqlen_new > 0) {
    check_writable_view(k, kCacheK);
    check_writable_view(v, kCacheV);
    NamedList others;
    for (int i = 0; i < inputs.count; ++i) {
      if (inputs.items[i].view != &k && inputs.items[i].view != &v) others.add(inputs.items[i].view, inputs.items[i].name);
    }
    check_apart(k, kCacheK, others);
    check_apart(v, kCacheV, others);
  }

  check_options(options, p.head_dim, p);
  return kp;
}

}  // namespace

KVCacheProblem validate_kv_cache(const TensorView& q, const KVCache& cache, const TensorView& out,
                                 const std::optional<TensorView>& lse, const std::optional<KVAppend>& append,
                                 const AttentionOptions& options) {
  return validate(q, cache, &out, lse, append, options);
}

KVCacheProblem validate_kv_cache_structure(const TensorView& q, const KVCache& cache,
                                           const std::optional<TensorView>& lse,
                                           const std::optional<KVAppend>& append) {
  return validate(q, cache, nullptr, lse, append, AttentionOptions{});
}

std::int64_t check_kv_cache_values(const KVCacheProblem& p, const std::int32_t* seqlens,
                                   const std::int32_t* block_table, std::int64_t bt_row_stride) {
  const std::int64_t capacity = p.capacity();
  const std::string capacity_text =
      p.is_paged() ? "capacity " + str(capacity) + " (max_pages_per_seq " + str(p.max_pages_per_seq) + " x page_size " +
                         str(p.page_size) + ")"
                   : "capacity " + str(capacity) + " (cache.k shape[1])";
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < p.attn.batch; ++b) {
    const std::int64_t len = seqlens[b];
    const std::string at = "cache.seqlens[" + str(b) + "] = " + str(len);
    if (len < 0) fail("cache.seqlens", "values >= 0", at);
    if (len > capacity) fail("cache.seqlens", "values <= the " + capacity_text, at);
    const std::int64_t after = len + p.seqlen_new;
    if (after > capacity) {
      fail("append.k", "seqlen_new (shape[1]) = " + str(p.seqlen_new) + " new tokens to fit the cache after " + at +
                           " (" + capacity_text + ")",
           str(len) + " + " + str(p.seqlen_new) + " = " + str(after) + " tokens");
    }
    if (after > longest) longest = after;
  }
  if (p.is_paged()) {
    for (std::int64_t b = 0; b < p.attn.batch; ++b) {
      const std::int64_t used = (seqlens[b] + p.seqlen_new + p.page_size - 1) / p.page_size;
      for (std::int64_t slot = 0; slot < used; ++slot) {
        const std::int64_t page = block_table[b * bt_row_stride + slot];
        if (page < 0 || page >= p.num_pages) {
          fail("cache.block_table",
               "entries in [0, num_pages = " + str(p.num_pages) + ") for the pages a sequence uses (sequence " + str(b) +
                   " uses slots 0.." + str(used - 1) + ")",
               "cache.block_table[" + str(b) + "][" + str(slot) + "] = " + str(page));
        }
      }
    }
  }
  return longest;
}

KVCacheShape kv_cache_shape_of(const KVCacheProblem& p) {
  KVCacheShape s;
  s.dtype = p.attn.dtype;
  s.device = p.attn.device;
  s.batch = p.attn.batch;
  s.seqlen_q = p.attn.seqlen_q;
  s.num_heads = p.attn.num_heads;
  s.num_kv_heads = p.attn.num_kv_heads;
  s.head_dim = p.attn.head_dim;
  s.seqlen_new = p.seqlen_new;
  s.paged = p.is_paged();
  if (s.paged) {
    s.page_size = p.page_size;
    s.num_pages = p.num_pages;
    s.max_pages_per_seq = p.max_pages_per_seq;
  } else {
    s.capacity = p.page_size;
  }
  s.max_cache_len = 0;
  s.with_lse = p.attn.lse != nullptr;
  return s;
}

void check_kv_cache_shape(const KVCacheShape& s, const AttentionOptions& options) {
  if (s.dtype != DType::f32 && s.dtype != DType::f16 && s.dtype != DType::bf16) {
    fail("shape.dtype", "f32, f16 or bf16", to_string(s.dtype));
  }
  if (s.device.type == DeviceType::cuda && !FASTATTN_HAVE_CUDA) {
    throw Error(ErrorCode::unsupported, "shape.device: expected cpu (fastattn was built without CUDA), got " + to_string(s.device));
  }
  auto at_least = [](const char* name, std::int64_t value, std::int64_t lo) {
    if (value < lo) fail(name, ">= " + str(lo), str(value));
  };
  at_least("shape.batch", s.batch, 0);
  at_least("shape.seqlen_q", s.seqlen_q, 0);
  at_least("shape.num_heads", s.num_heads, 1);
  at_least("shape.num_kv_heads", s.num_kv_heads, 1);
  at_least("shape.seqlen_new", s.seqlen_new, 0);
  at_least("shape.max_cache_len", s.max_cache_len, 0);
  if (s.num_heads % s.num_kv_heads != 0) fail("shape.num_kv_heads", "a divisor of num_heads = " + str(s.num_heads), str(s.num_kv_heads));
  if (s.head_dim % 8 != 0 || s.head_dim < 8 || s.head_dim > kMaxHeadDim) {
    fail("shape.head_dim", "a multiple of 8 in [8, " + str(kMaxHeadDim) + "]", str(s.head_dim));
  }
  if (s.seqlen_q > kMaxIndex32) fail("shape.seqlen_q", "<= 2^31 - 1", str(s.seqlen_q));
  if (s.paged) {
    at_least("shape.page_size", s.page_size, 1);
    at_least("shape.num_pages", s.num_pages, 0);
    at_least("shape.max_pages_per_seq", s.max_pages_per_seq, 0);
    if (s.max_pages_per_seq > kMaxIndex32 / s.page_size) {
      fail("shape.max_pages_per_seq", "x page_size <= 2^31 - 1 tokens per sequence", str(s.max_pages_per_seq));
    }
  } else {
    at_least("shape.capacity", s.capacity, 0);
    if (s.capacity > kMaxIndex32) fail("shape.capacity", "<= 2^31 - 1", str(s.capacity));
  }
  AttentionProblem scratch;
  check_options(options, s.head_dim, scratch);
}

KVCacheProblem kv_cache_problem_of(const KVCacheShape& s, const AttentionOptions& options) {
  KVCacheProblem kp;
  AttentionProblem& p = kp.attn;
  p.dtype = s.dtype;
  p.device = s.device;
  p.batch = s.batch;
  p.seqlen_q = s.seqlen_q;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  kp.page_size = s.paged ? s.page_size : s.capacity;
  kp.num_pages = s.paged ? s.num_pages : s.batch;
  kp.max_pages_per_seq = s.paged ? s.max_pages_per_seq : 1;
  p.seqlen_k = kp.capacity();
  p.total_q = p.batch * p.seqlen_q;
  p.total_k = kp.num_pages * kp.page_size;
  // Dense strides, as a caller's contiguous tensors would have.
  const std::int64_t token_q = s.num_heads * s.head_dim, token_k = s.num_kv_heads * s.head_dim;
  p.q.stride = {s.seqlen_q * token_q, token_q, s.head_dim};
  p.out.stride = p.q.stride;
  p.k.stride = {kp.page_size * token_k, token_k, s.head_dim};
  p.v.stride = p.k.stride;
  kp.k_page_stride = kp.v_page_stride = p.k.stride.batch;
  kp.block_table_stride = kp.max_pages_per_seq;
  // A paged problem is told apart by a non-null block table (kv_cache_problem.hpp); the planners
  // never read it, and this one-entry table would read as page 0 if they did.
  static const std::int32_t kPlannedTable[1] = {0};
  if (s.paged) kp.block_table = kPlannedTable;
  kp.seqlen_new = s.seqlen_new;
  kp.k_new.stride = {s.seqlen_new * token_k, token_k, s.head_dim};
  kp.v_new.stride = kp.k_new.stride;
  if (s.with_lse) {
    p.lse_batch_stride = s.num_heads * s.seqlen_q;
    p.lse_head_stride = s.seqlen_q;
    p.lse_token_stride = 1;
  }
  check_options(options, s.head_dim, p);
  return kp;
}

void check_matches_plan(const KVCacheShape& plan, const KVCacheShape& call) {
  auto expect = [](const char* arg, const char* what, std::int64_t planned, std::int64_t got) {
    if (planned != got) fail(arg, std::string(what) + " = " + str(planned) + " (the plan's)", str(got));
  };
  if (call.dtype != plan.dtype) fail("q", std::string("dtype ") + to_string(plan.dtype) + " (the plan's)", std::string("dtype ") + to_string(call.dtype));
  if (call.device != plan.device) fail("q", "device " + to_string(plan.device) + " (the plan's)", "device " + to_string(call.device));
  expect("q", "batch (shape[0])", plan.batch, call.batch);
  expect("q", "seqlen_q (shape[1])", plan.seqlen_q, call.seqlen_q);
  expect("q", "num_heads (shape[2])", plan.num_heads, call.num_heads);
  expect("q", "head_dim (shape[3])", plan.head_dim, call.head_dim);
  expect("cache.k", "num_kv_heads (shape[2])", plan.num_kv_heads, call.num_kv_heads);
  if (call.paged != plan.paged) {
    fail("cache.block_table", plan.paged ? "a block table (the plan is for a paged cache)" : "none (the plan is for a contiguous cache)",
         call.paged ? "a block table" : "none");
  }
  if (plan.paged) {
    expect("cache.k", "num_pages (shape[0])", plan.num_pages, call.num_pages);
    expect("cache.k", "page_size (shape[1])", plan.page_size, call.page_size);
    expect("cache.block_table", "max_pages_per_seq (shape[1])", plan.max_pages_per_seq, call.max_pages_per_seq);
  } else {
    expect("cache.k", "capacity (shape[1])", plan.capacity, call.capacity);
  }
  expect("append.k", "seqlen_new (shape[1]; 0: no append)", plan.seqlen_new, call.seqlen_new);
  if (call.with_lse != plan.with_lse) {
    fail("lse", plan.with_lse ? "a tensor (the plan has with_lse)" : "none (the plan has no with_lse)", call.with_lse ? "a tensor" : "none");
  }
}

}  // namespace fastattn
