// ring_attention.cpp — ring attention forward and backward (context parallelism) on CPU ranks.
//
// Each rank holds its query tokens and one K/V block (its own key tokens). In P steps every
// block visits every rank: at step s rank r holds the block of rank (r - s) mod P, computes its
// query rows against it (fastattn::forward / backward, one call per pair of chunks that see each
// other: ring_plan.hpp) while a WorkerThread already moves the block on to rank r + 1 and receives
// the next one into the other half of a double buffer.
//   forward:  per-block (out, lse) partials merged in f32 by merge_states into an f32
//             accumulator, rounded to the dtype once at the end (bf16 partials summed in bf16
//             made ring-flash-attn's error grow with the world size). RingPartials::f32 (the
//             default) also keeps each block's partial in f32 by running the block calls on f32
//             copies of 16-bit inputs.
//   backward: with the global out and lse, each block's call gives exact partial gradients;
//             dQ accumulates locally in f32, dK/dV accumulate in f32 buffers that travel the
//             ring one step behind their K/V block and reach their owner after the last step.
// A failure on one rank (a throwing call, bad input discovered late) aborts the communicator,
// so the other ranks fail at once instead of waiting for the timeout.
#include <cmath>
#include <limits>
#include <vector>

#include "api/view_checks.hpp"
#include "common/dtype.hpp"
#include "distributed/comm_common.hpp"
#include "common/worker_thread.hpp"
#include "distributed/ring_plan.hpp"
#include "distributed/sharded_checks.hpp"
#include "fastattn/attention.hpp"
#include "fastattn/merge.hpp"

namespace fastattn::distributed {
namespace {

TensorView rows(TensorView t, std::int64_t begin, std::int64_t len) {  // dim 1 of [B, S, H, D]
  t.data = static_cast<std::uint8_t*>(t.data) + begin * t.stride[1] * static_cast<std::int64_t>(dtype_size(t.dtype));
  t.shape[1] = len;
  return t;
}
TensorView lse_rows(TensorView t, std::int64_t begin, std::int64_t len) {  // dim 2 of [B, H, S]
  t.data = static_cast<std::uint8_t*>(t.data) + begin * t.stride[2] * static_cast<std::int64_t>(dtype_size(t.dtype));
  t.shape[2] = len;
  return t;
}

// A K/V block (or its dK/dV) packed in one buffer: k [B, L, Hkv, D] then v, contiguous; `packed`
// is the whole 1-D message.
struct KvBlock {
  TensorView k, v, packed;
};
KvBlock kv_block(void* buffer, DType dtype, const Geometry& g, std::int64_t len) {
  const std::int64_t half = g.batch * len * g.kv_heads * g.dim;
  auto* base = static_cast<std::uint8_t*>(buffer);
  KvBlock b;
  b.k = make_tensor(base, dtype, {g.batch, len, g.kv_heads, g.dim});
  b.v = make_tensor(base + half * static_cast<std::int64_t>(dtype_size(dtype)), dtype, {g.batch, len, g.kv_heads, g.dim});
  b.packed = make_tensor(base, dtype, {2 * half});
  return b;
}

// dst (f32) = or += src (any dtype), element-wise over [B, S, H, D] views of one shape.
void widen_into(const TensorView& src, const TensorView& dst, bool accumulate) {
  for (std::int64_t b = 0; b < src.shape[0]; ++b)
    for (std::int64_t t = 0; t < src.shape[1]; ++t)
      for (std::int64_t h = 0; h < src.shape[2]; ++h) {
        const std::int64_t so = b * src.stride[0] + t * src.stride[1] + h * src.stride[2];
        float* d = static_cast<float*>(dst.data) + b * dst.stride[0] + t * dst.stride[1] + h * dst.stride[2];
        for (std::int64_t c = 0; c < src.shape[3]; ++c) {
          const float x = static_cast<float>(load_element(src.data, src.dtype, so + c));
          d[c] = accumulate ? d[c] + x : x;
        }
      }
}

// dst (any dtype) = src (f32 or the same dtype), rounded once.
void store_into(const TensorView& src, const TensorView& dst) {
  for (std::int64_t b = 0; b < src.shape[0]; ++b)
    for (std::int64_t t = 0; t < src.shape[1]; ++t)
      for (std::int64_t h = 0; h < src.shape[2]; ++h) {
        const std::int64_t so = b * src.stride[0] + t * src.stride[1] + h * src.stride[2];
        const std::int64_t doff = b * dst.stride[0] + t * dst.stride[1] + h * dst.stride[2];
        for (std::int64_t c = 0; c < src.shape[3]; ++c)
          store_element(dst.data, dst.dtype, doff + c, load_element(src.data, src.dtype, so + c));
      }
}

// The tensors the block calls read, in the compute dtype: the caller's views when that is their
// dtype, else f32 copies (RingPartials::f32 with 16-bit inputs) made once, or per K/V step.
struct ComputeCopy {
  std::vector<float> storage;
  TensorView view;
};
ComputeCopy in_compute_dtype(const TensorView& t, DType compute) {
  ComputeCopy c;
  if (t.dtype == compute) {
    c.view = t;
    return c;
  }
  c.storage.resize(static_cast<std::size_t>(t.numel()));
  c.view = make_tensor(c.storage.data(), DType::f32, {t.shape[0], t.shape[1], t.shape[2], t.shape[3]});
  widen_into(t, c.view, false);
  return c;
}
// A K/V block in the compute dtype: `block` itself, or widened into `scratch` (f32, the size of
// the largest block).
KvBlock block_in_compute_dtype(const KvBlock& block, DType compute, std::vector<float>& scratch, const Geometry& g) {
  if (block.k.dtype == compute) return block;
  const KvBlock wide = kv_block(scratch.data(), DType::f32, g, block.k.shape[1]);
  widen_into(block.k, wide.k, false);
  widen_into(block.v, wide.v, false);
  return wide;
}

void store_lse(const std::vector<float>& acc_lse, const Geometry& g, const TensorView& lse) {
  for (std::int64_t b = 0; b < g.batch; ++b)
    for (std::int64_t h = 0; h < g.heads; ++h)
      for (std::int64_t t = 0; t < g.local_q; ++t)
        static_cast<float*>(lse.data)[b * lse.stride[0] + h * lse.stride[1] + t * lse.stride[2]] =
            acc_lse[static_cast<std::size_t>((b * g.heads + h) * g.local_q + t)];
}

AttentionOptions block_options(const RingOptions& o, const Geometry& g, const BlockPair& p) {
  AttentionOptions a;
  a.softmax_scale = g.scale;
  a.backend = o.backend == Backend::automatic ? Backend::cpu : o.backend;
  a.num_threads = o.num_threads;
  a.alignment = MaskAlignment::top_left;
  a.window_right = p.window_right;
  return a;
}

// Runs the ring: for each step, `transfer(step)` (on the WorkerThread when overlapping, else
// first) alongside `compute(step)`, then `after(step)` once both are done. On any failure the
// communicator is aborted (the peers fail fast) and the first error is rethrown.
template <typename Transfer, typename Compute, typename After>
void run_ring(Communicator& comm, const RingOptions& o, Transfer transfer, Compute compute, After after) {
  const int steps = comm.size();
  std::unique_ptr<WorkerThread> thread;
  if (o.overlap && steps > 1) thread = std::make_unique<WorkerThread>();
  with_abort_on_failure(comm, "ring attention", [&] {
    for (int s = 0; s < steps; ++s) {
      if (thread) {
        thread->submit([&transfer, s] { transfer(s); });
        try {
          compute(s);
        } catch (...) {
          // Fail the peers first (the transfer may be waiting on one of them), then join.
          comm.abort("ring attention: a block call threw on this rank");
          try {
            thread->wait();
          } catch (...) {
          }
          throw;
        }
        thread->wait();
      } else {
        transfer(s);
        compute(s);
      }
      after(s);
    }
  });
}

}  // namespace

RingReport ring_attention_forward(Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                                  const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                                  const std::optional<TensorView>& lse, const RingOptions& options) {
  const std::string fn = "ring_attention_forward";
  const Geometry g = validate(comm, q_shards, kv_shards, q, k, v, options, fn);
  check_like(out, q, fn + ": out", "q");
  if (lse) check_lse(*lse, g, fn + ": lse");
  const int world = comm.size(), me = comm.rank();
  const std::size_t elem = dtype_size(g.dtype);
  const std::size_t q_elems = static_cast<std::size_t>(g.batch * g.local_q * g.heads * g.dim);
  const std::size_t lse_elems = static_cast<std::size_t>(g.batch * g.heads * g.local_q);
  const std::size_t block_elems = static_cast<std::size_t>(2 * g.batch * g.max_block * g.kv_heads * g.dim);

  // acc, part32: [B, Lq, H, D] f32; acc_lse, part_lse: [B, H, Lq] f32; part: [B, Lq, H, D] dtype
  // (the block call's output, before widening); kv[2]: the double-buffered K/V blocks.
  const DType compute_dtype = options.partials == RingPartials::f32 ? DType::f32 : g.dtype;
  std::vector<float> acc(q_elems, 0.0f), part32(q_elems), acc_lse(lse_elems, -std::numeric_limits<float>::infinity()),
      part_lse(lse_elems), kv_wide(compute_dtype == g.dtype ? 0 : block_elems);
  std::vector<std::uint8_t> part(compute_dtype == DType::f32 ? 0 : q_elems * elem);
  const ComputeCopy q_c = in_compute_dtype(q, compute_dtype);
  std::vector<std::uint8_t> kv[2] = {std::vector<std::uint8_t>(block_elems * elem), std::vector<std::uint8_t>(block_elems * elem)};
  const TensorView acc_v = make_tensor(acc.data(), DType::f32, {g.batch, g.local_q, g.heads, g.dim});
  const TensorView part32_v = make_tensor(part32.data(), DType::f32, {g.batch, g.local_q, g.heads, g.dim});
  const TensorView part_v = compute_dtype == DType::f32 ? part32_v : make_tensor(part.data(), g.dtype, {g.batch, g.local_q, g.heads, g.dim});
  const TensorView acc_lse_v = make_tensor(acc_lse.data(), DType::f32, {g.batch, g.heads, g.local_q});
  const TensorView part_lse_v = make_tensor(part_lse.data(), DType::f32, {g.batch, g.heads, g.local_q});

  auto owner = [&](int s) { return ((me - s) % world + world) % world; };
  auto block = [&](int s) { return kv_block(kv[s % 2].data(), g.dtype, g, kv_shards.local_length(owner(s))); };
  {
    const KvBlock own = block(0);
    store_into(k, own.k);
    store_into(v, own.v);
  }
  MergeOptions mo;
  mo.backend = options.backend == Backend::reference ? Backend::reference : Backend::cpu;
  mo.num_threads = options.num_threads;
  RingReport report;
  report.steps = world;

  auto transfer = [&](int s) {
    if (s + 1 < world) ring_shift(comm, block(s).packed, block(s + 1).packed);
  };
  auto compute = [&](int s) {
    const std::vector<BlockPair> pairs = block_pairs(q_shards.chunks[static_cast<std::size_t>(me)],
                                                     kv_shards.chunks[static_cast<std::size_t>(owner(s))], options.causal, g.offset);
    if (pairs.empty()) return;
    const KvBlock cur = block_in_compute_dtype(block(s), compute_dtype, kv_wide, g);
    for (const BlockPair& p : pairs) {
      const TensorView po = rows(part_v, p.q_begin, p.q_len), pl = lse_rows(part_lse_v, p.q_begin, p.q_len);
      const KernelChoice choice = forward(rows(q_c.view, p.q_begin, p.q_len), rows(cur.k, p.k_begin, p.k_len),
                                          rows(cur.v, p.k_begin, p.k_len), po, pl, block_options(options, g, p));
      report.kernel = choice.kernel;
      ++report.block_calls;
      const TensorView p32 = rows(part32_v, p.q_begin, p.q_len);
      if (compute_dtype != DType::f32) widen_into(po, p32, false);
      const TensorView a = rows(acc_v, p.q_begin, p.q_len), al = lse_rows(acc_lse_v, p.q_begin, p.q_len);
      merge_states(a, al, p32, pl, a, al, mo);
    }
  };
  run_ring(comm, options, transfer, compute, [](int) {});
  store_into(acc_v, out);
  if (lse) store_lse(acc_lse, g, *lse);
  return report;
}

RingReport ring_attention_backward(Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                                   const TensorView& dout, const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const TensorView& lse, const TensorView& dq, const TensorView& dk,
                                   const TensorView& dv, const RingOptions& options) {
  const std::string fn = "ring_attention_backward";
  const Geometry g = validate(comm, q_shards, kv_shards, q, k, v, options, fn);
  check_like(dout, q, fn + ": dout", "q");
  check_like(out, q, fn + ": out", "q");
  check_like(dq, q, fn + ": dq", "q");
  check_like(dk, k, fn + ": dk", "k");
  check_like(dv, k, fn + ": dv", "k");
  check_lse(lse, g, fn + ": lse");
  const int world = comm.size(), me = comm.rank();
  const std::size_t elem = dtype_size(g.dtype);
  const std::size_t q_elems = static_cast<std::size_t>(g.batch * g.local_q * g.heads * g.dim);
  const std::size_t block_elems = static_cast<std::size_t>(2 * g.batch * g.max_block * g.kv_heads * g.dim);

  // dq_acc: [B, Lq, H, D] f32; dq_part: the block call's dq (dtype); kv[2]: K/V double buffer;
  // dkv_part: the block call's dk, dv (dtype); dkv_local: this step's dK/dV of the block (f32);
  // dkv_in: the travelling accumulator as received; dkv_out: as sent on (all [2][B, L, Hkv, D]).
  const DType compute_dtype = options.partials == RingPartials::f32 ? DType::f32 : g.dtype;
  const std::size_t compute_elem = dtype_size(compute_dtype);
  std::vector<float> dq_acc(q_elems, 0.0f), dkv_local(block_elems), dkv_in(block_elems), dkv_out(block_elems),
      kv_wide(compute_dtype == g.dtype ? 0 : block_elems);
  std::vector<std::uint8_t> dq_part(q_elems * compute_elem), dkv_part(block_elems * compute_elem);
  const ComputeCopy q_c = in_compute_dtype(q, compute_dtype), out_c = in_compute_dtype(out, compute_dtype),
                    dout_c = in_compute_dtype(dout, compute_dtype);
  std::vector<std::uint8_t> kv[2] = {std::vector<std::uint8_t>(block_elems * elem), std::vector<std::uint8_t>(block_elems * elem)};
  const TensorView dq_acc_v = make_tensor(dq_acc.data(), DType::f32, {g.batch, g.local_q, g.heads, g.dim});
  const TensorView dq_part_v = make_tensor(dq_part.data(), compute_dtype, {g.batch, g.local_q, g.heads, g.dim});

  auto owner = [&](int s) { return ((me - s) % world + world) % world; };
  auto len = [&](int s) { return kv_shards.local_length(owner(s)); };
  auto block = [&](int s) { return kv_block(kv[s % 2].data(), g.dtype, g, len(s)); };
  {
    const KvBlock own = block(0);
    store_into(k, own.k);
    store_into(v, own.v);
  }
  RingReport report;
  report.steps = world;

  auto transfer = [&](int s) {
    if (s + 1 < world) ring_shift(comm, block(s).packed, block(s + 1).packed);
    // The accumulator of the block computed at step s - 1 moves on with it.
    if (s >= 1)
      ring_shift(comm, kv_block(dkv_out.data(), DType::f32, g, len(s - 1)).packed,
                 kv_block(dkv_in.data(), DType::f32, g, len(s)).packed);
  };
  auto compute = [&](int s) {
    const KvBlock local = kv_block(dkv_local.data(), DType::f32, g, len(s)), part = kv_block(dkv_part.data(), compute_dtype, g, len(s));
    std::fill(dkv_local.begin(), dkv_local.begin() + local.packed.shape[0], 0.0f);
    const std::vector<BlockPair> pairs = block_pairs(q_shards.chunks[static_cast<std::size_t>(me)],
                                                     kv_shards.chunks[static_cast<std::size_t>(owner(s))], options.causal, g.offset);
    if (pairs.empty()) return;
    const KvBlock cur = block_in_compute_dtype(block(s), compute_dtype, kv_wide, g);
    for (const BlockPair& p : pairs) {
      const TensorView pdq = rows(dq_part_v, p.q_begin, p.q_len);
      const TensorView pdk = rows(part.k, p.k_begin, p.k_len), pdv = rows(part.v, p.k_begin, p.k_len);
      const KernelChoice choice =
          backward(rows(dout_c.view, p.q_begin, p.q_len), rows(q_c.view, p.q_begin, p.q_len), rows(cur.k, p.k_begin, p.k_len),
                   rows(cur.v, p.k_begin, p.k_len), rows(out_c.view, p.q_begin, p.q_len), lse_rows(lse, p.q_begin, p.q_len), pdq,
                   pdk, pdv, block_options(options, g, p));
      report.kernel = choice.kernel;
      ++report.block_calls;
      widen_into(pdq, rows(dq_acc_v, p.q_begin, p.q_len), true);
      widen_into(pdk, rows(local.k, p.k_begin, p.k_len), true);
      widen_into(pdv, rows(local.v, p.k_begin, p.k_len), true);
    }
  };
  auto after = [&](int s) {
    // dkv_out = what earlier ranks added to this block (none at step 0) + this rank's share.
    const std::size_t n = static_cast<std::size_t>(kv_block(dkv_local.data(), DType::f32, g, len(s)).packed.shape[0]);
    for (std::size_t i = 0; i < n; ++i) dkv_out[i] = (s == 0 ? 0.0f : dkv_in[i]) + dkv_local[i];
  };
  run_ring(comm, options, transfer, compute, after);

  // The last hop: every block's accumulator home to its owner (len(-1): this rank's block).
  std::vector<float>* own = &dkv_out;
  if (world > 1) {
    try {
      ring_shift(comm, kv_block(dkv_out.data(), DType::f32, g, len(world - 1)).packed,
                 kv_block(dkv_in.data(), DType::f32, g, len(0)).packed);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::device_error) comm.abort(std::string("ring attention failed on this rank: ") + e.what());
      throw;
    }
    own = &dkv_in;
  }
  const KvBlock mine = kv_block(own->data(), DType::f32, g, len(0));
  store_into(mine.k, dk);
  store_into(mine.v, dv);
  store_into(dq_acc_v, dq);
  return report;
}

}  // namespace fastattn::distributed
