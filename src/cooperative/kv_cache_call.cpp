// kv_cache_call.cpp — attention_with_kv_cache over a CooperativeKVCache (cooperative.hpp): the
// KV-cache call's semantics (new K/V attended as the newest keys, then appended) on top of
// cooperative_attention, which attends them without appending, and CooperativeKVCache::append.
// The room for the new tokens is checked before anything runs, so a full cache writes nothing;
// the append follows a successful attention only.
#include "fastattn/cooperative.hpp"

namespace fastattn {

namespace {

// Tokens of `t` ([1, seqlen_new, kv_heads, d] or [seqlen_new, kv_heads, d]); shape errors are
// cooperative_attention's and append's to report.
std::int64_t new_tokens(const TensorView& t) {
  if (t.rank == 4) return t.shape[1];
  if (t.rank == 3) return t.shape[0];
  return 0;
}

}  // namespace

KernelChoice attention_with_kv_cache(const TensorView& q, CooperativeKVCache& cache, std::int64_t seq,
                                     const TensorView& out, const std::optional<TensorView>& lse,
                                     const std::optional<KVAppend>& append, const CooperativeOptions& options) {
  std::optional<CooperativeNewKV> new_kv;
  if (append) {
    cache.check_room(seq, new_tokens(append->k), "append");  // room first: a full cache writes nothing
    new_kv = CooperativeNewKV{append->k, append->v};
  }
  KernelChoice choice = cooperative_attention(q, cache, seq, out, lse, new_kv, options);
  if (append) cache.append(seq, append->k, append->v);
  return choice;
}

}  // namespace fastattn
