// The README's usage example, built against an installed fastattn.
#include <fastattn/fastattn.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  const int batch = 2, seqlen = 128, heads = 8, kv_heads = 2, head_dim = 64;
  std::vector<float> q(batch * seqlen * heads * head_dim), k(batch * seqlen * kv_heads * head_dim),
      v(k.size()), out(q.size()), lse(batch * heads * seqlen);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = normal(rng);

  using fastattn::DType;
  auto Q = fastattn::make_tensor(q.data(), DType::f32, {batch, seqlen, heads, head_dim});
  auto K = fastattn::make_tensor(k.data(), DType::f32, {batch, seqlen, kv_heads, head_dim});
  auto V = fastattn::make_tensor(v.data(), DType::f32, {batch, seqlen, kv_heads, head_dim});
  auto O = fastattn::make_tensor(out.data(), DType::f32, {batch, seqlen, heads, head_dim});
  auto L = fastattn::make_tensor(lse.data(), DType::f32, {batch, heads, seqlen});

  fastattn::AttentionOptions options;
  options.causal = true;  // GQA (8 query heads over 2 KV heads), causal mask
  try {
    fastattn::KernelChoice choice = fastattn::forward(Q, K, V, O, L, options);
    std::printf("%s\n", choice.describe().c_str());
  } catch (const fastattn::Error& e) {
    std::fprintf(stderr, "fastattn: %s\n", e.what());
    return 1;
  }
  for (float x : out) {
    if (!std::isfinite(x)) return 1;
  }
  std::printf("consumer ok: out[0] = %f, lse[0] = %f\n", out[0], lse[0]);
  return 0;
}
