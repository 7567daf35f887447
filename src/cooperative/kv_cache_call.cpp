// kv_cache_call.cpp — attention_with_kv_cache over a CooperativeKVCache (cooperative.hpp): the
// KV-cache call's semantics (new K/V attended as the newest keys, then appended) on top of
// cooperative_attention, which attends them without appending, and CooperativeKVCache::append.
// The room for the new tokens is checked before anything runs, so a full cache writes nothing;
// the append follows a successful attention only.
#include <string>

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
  if (seq < 0 || seq >= cache.config().max_sequences) {
    throw Error(ErrorCode::invalid_argument, "seq: expected a sequence id in [0, " +
                                                 std::to_string(cache.config().max_sequences) + "), got " +
                                                 std::to_string(seq));
  }
  std::optional<CooperativeNewKV> new_kv;
  if (append) {
    // Room first: the pages the new tokens need beyond the sequence's last one.
    const std::int64_t n = new_tokens(append->k), ps = cache.config().page_size, len = cache.length(seq);
    const std::int64_t held = static_cast<std::int64_t>(cache.pages(seq).size());
    const std::int64_t need = (len + n + ps - 1) / ps - held;
    const std::int64_t available = cache.free_pages(PageTier::device) + cache.free_pages(PageTier::host);
    if (need > available) {
      throw Error(ErrorCode::out_of_memory,
                  "append: expected at most " + std::to_string(available * ps + held * ps - len) +
                      " new tokens (the cache is full: " + std::to_string(available) + " free pages of " +
                      std::to_string(ps) + " tokens), got " + std::to_string(n) + " tokens");
    }
    new_kv = CooperativeNewKV{append->k, append->v};
  }
  KernelChoice choice = cooperative_attention(q, cache, seq, out, lse, new_kv, options);
  if (append) cache.append(seq, append->k, append->v);
  return choice;
}

}  // namespace fastattn
