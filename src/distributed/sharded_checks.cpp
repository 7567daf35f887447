// sharded_checks.cpp — argument checks of the context-parallel calls (sharded_checks.hpp).
#include "distributed/sharded_checks.hpp"

#include <algorithm>
#include <cmath>

#include "api/view_checks.hpp"
#include "distributed/ring_plan.hpp"

namespace fastattn::distributed {

void check_4d(const TensorView& t, const std::string& arg) {
  check_view_layout(t, arg);
  if (t.rank != 4) fail_argument(arg, "a 4-D tensor [batch, tokens, heads, head_dim]", std::to_string(t.rank) + "-D " + t.shape_string());
  if (t.device.type != DeviceType::cpu) fail_argument(arg, "a CPU tensor (context parallelism runs on CPU ranks in this build)", to_string(t.device));
  if (t.shape[3] > 1 && t.stride[3] != 1) fail_argument(arg, "head_dim contiguous (stride[3] = 1)", std::to_string(t.stride[3]));
}

void check_like(const TensorView& t, const TensorView& like, const std::string& arg, const std::string& like_name) {
  check_4d(t, arg);
  if (t.dtype != like.dtype) fail_argument(arg, "dtype " + std::string(to_string(like.dtype)) + " (that of " + like_name + ")", to_string(t.dtype));
  for (int d = 0; d < 4; ++d)
    if (t.shape[d] != like.shape[d]) fail_argument(arg, "shape " + like.shape_string() + " (that of " + like_name + ")", t.shape_string());
}

void check_lse(const TensorView& t, const Geometry& g, const std::string& arg) {
  check_view_layout(t, arg);
  if (t.rank != 3 || t.dtype != DType::f32 || t.device.type != DeviceType::cpu || t.shape[0] != g.batch ||
      t.shape[1] != g.heads || t.shape[2] != g.local_q)
    fail_argument(arg,
                  "an f32 CPU tensor [" + std::to_string(g.batch) + ", " + std::to_string(g.heads) + ", " + std::to_string(g.local_q) + "]",
                  std::string(to_string(t.dtype)) + " " + to_string(t.device) + " " + t.shape_string());
}

Geometry validate(const Communicator& comm, const SequenceShards& q_shards, const SequenceShards& kv_shards,
                  const TensorView& q, const TensorView& k, const TensorView& v, const RingOptions& o,
                  const std::string& fn) {
  if (comm.device().type != DeviceType::cpu)
    throw Error(ErrorCode::unsupported, fn + ": comm: context parallelism runs on CPU communicators in this build, got one on " +
                                            to_string(comm.device()));
  check_shards(q_shards, comm.size(), fn + ": q_shards");
  check_shards(kv_shards, comm.size(), fn + ": kv_shards");
  check_4d(q, fn + ": q");
  check_4d(k, fn + ": k");
  check_like(v, k, fn + ": v", "k");
  Geometry g;
  g.dtype = q.dtype;
  g.batch = q.shape[0];
  g.heads = q.shape[2];
  g.kv_heads = k.shape[2];
  g.dim = q.shape[3];
  g.local_q = q.shape[1];
  g.local_k = k.shape[1];
  if (g.dtype != DType::f32 && g.dtype != DType::f16 && g.dtype != DType::bf16)
    fail_argument(fn + ": q", "dtype f32, f16 or bf16", to_string(g.dtype));
  if (k.dtype != g.dtype) fail_argument(fn + ": k", "dtype " + std::string(to_string(g.dtype)) + " (that of q)", to_string(k.dtype));
  if (k.shape[0] != g.batch) fail_argument(fn + ": k", "shape[0] (batch) = " + std::to_string(g.batch), std::to_string(k.shape[0]));
  if (k.shape[3] != g.dim) fail_argument(fn + ": k", "shape[3] (head_dim) = " + std::to_string(g.dim), std::to_string(k.shape[3]));
  if (g.kv_heads < 1 || g.heads % g.kv_heads != 0)
    fail_argument(fn + ": k", "shape[2] (num_kv_heads) to divide q.shape[2] = " + std::to_string(g.heads), std::to_string(g.kv_heads));
  if (g.local_q != q_shards.local_length(comm.rank()))
    fail_argument(fn + ": q", "shape[1] = this rank's " + std::to_string(q_shards.local_length(comm.rank())) + " tokens of q_shards",
                  std::to_string(g.local_q));
  if (g.local_k != kv_shards.local_length(comm.rank()))
    fail_argument(fn + ": k", "shape[1] = this rank's " + std::to_string(kv_shards.local_length(comm.rank())) + " tokens of kv_shards",
                  std::to_string(g.local_k));
  if (o.backend != Backend::cpu && o.backend != Backend::reference && o.backend != Backend::automatic)
    fail_argument(fn + ": options.backend", "cpu, reference or automatic", to_string(o.backend));
  if (o.softmax_scale && !std::isfinite(*o.softmax_scale))
    fail_argument(fn + ": options.softmax_scale", "a finite value", std::to_string(*o.softmax_scale));
  for (int r = 0; r < comm.size(); ++r) g.max_block = std::max(g.max_block, kv_shards.local_length(r));
  g.scale = o.softmax_scale ? *o.softmax_scale : 1.0f / std::sqrt(static_cast<float>(g.dim));
  g.offset = kv_shards.seqlen - q_shards.seqlen;
  return g;
}

}  // namespace fastattn::distributed
