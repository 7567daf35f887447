// case.cpp — Case: its text form, its parser, and the random case generator.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "common/mask.hpp"
#include "fastattn/error.hpp"
#include "harness/harness.hpp"
#include "harness/random.hpp"

namespace fastattn::harness {
namespace {

std::string format_float(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}

std::string join(const std::vector<std::int32_t>& lens) {
  std::string s;
  for (std::size_t i = 0; i < lens.size(); ++i) s += (i ? "," : "") + std::to_string(lens[i]);
  return s;
}

[[noreturn]] void bad_token(const std::string& token, const std::string& expected) {
  throw Error(ErrorCode::invalid_argument,
              "case: expected " + expected + ", got '" + token + "'");
}

std::int64_t parse_int(const std::string& token, const std::string& value) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(value, &used);
    if (used == value.size()) return x;
  } catch (const std::exception&) {
  }
  bad_token(token, "an integer value");
}

float parse_float(const std::string& token, const std::string& value) {
  try {
    std::size_t used = 0;
    const float x = std::stof(value, &used);
    if (used == value.size()) return x;
  } catch (const std::exception&) {
  }
  bad_token(token, "a number");
}

std::vector<std::int32_t> parse_lens(const std::string& token, const std::string& value) {
  std::vector<std::int32_t> lens;
  std::stringstream ss(value);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const std::int64_t x = parse_int(token, item);
    if (x < 0 || x > 0x7fffffff) bad_token(token, "non-negative lengths");
    lens.push_back(static_cast<std::int32_t>(x));
  }
  if (lens.empty()) bad_token(token, "a comma-separated list of lengths");
  return lens;
}

}  // namespace

std::int64_t Case::effective_batch() const {
  return is_varlen() ? static_cast<std::int64_t>(seqlens_q.size()) : batch;
}

float Case::scale() const {
  return softmax_scale != 0.0f ? softmax_scale  // negative scales are valid API input
                               : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::string Case::to_string() const {
  std::string s;
  if (is_varlen()) {
    s += "lens_q=" + join(seqlens_q) + " lens_k=" + join(seqlens_k);
  } else {
    s += "b=" + std::to_string(batch) + " sq=" + std::to_string(seqlen_q) +
         " sk=" + std::to_string(seqlen_k);
  }
  s += " h=" + std::to_string(num_heads) + " hkv=" + std::to_string(num_kv_heads) +
       " d=" + std::to_string(head_dim) + " dtype=" + fastattn::to_string(dtype);
  if (causal) {
    s += " mask=causal";
  } else if (window_left >= 0 || window_right >= 0) {
    s += " mask=window";
  } else {
    s += " mask=none";
  }
  if (window_left >= 0) s += " wl=" + std::to_string(window_left);
  if (window_right >= 0) s += " wr=" + std::to_string(window_right);
  s += alignment == MaskAlignment::bottom_right ? " align=bottom_right" : " align=top_left";
  if (softcap > 0.0f) s += " softcap=" + format_float(softcap);
  if (softmax_scale != 0.0f) s += " scale=" + format_float(softmax_scale);
  if (qk_std != 1.0f) s += " qk_std=" + format_float(qk_std);
  s += strided ? " layout=strided" : " layout=contiguous";
  if (deterministic) s += " det=1";
  if (num_threads > 0) s += " threads=" + std::to_string(num_threads);
  s += " seed=" + std::to_string(seed);
  return s;
}

Case parse_case(const std::string& text) {
  Case c;
  std::stringstream ss(text);
  std::string token;
  while (ss >> token) {
    const std::size_t eq = token.find('=');
    if (eq == std::string::npos || eq == 0) bad_token(token, "key=value");
    const std::string key = token.substr(0, eq), value = token.substr(eq + 1);
    if (key == "b") c.batch = parse_int(token, value);
    else if (key == "sq") c.seqlen_q = parse_int(token, value);
    else if (key == "sk") c.seqlen_k = parse_int(token, value);
    else if (key == "h") c.num_heads = parse_int(token, value);
    else if (key == "hkv") c.num_kv_heads = parse_int(token, value);
    else if (key == "d") c.head_dim = parse_int(token, value);
    else if (key == "lens_q") c.seqlens_q = parse_lens(token, value);
    else if (key == "lens_k") c.seqlens_k = parse_lens(token, value);
    else if (key == "dtype") {
      if (value == "f32") c.dtype = DType::f32;
      else if (value == "f16") c.dtype = DType::f16;
      else if (value == "bf16") c.dtype = DType::bf16;
      else bad_token(token, "dtype=f32|f16|bf16");
    } else if (key == "mask") {
      if (value == "causal") c.causal = true;
      else if (value == "none" || value == "window") c.causal = false;
      else bad_token(token, "mask=none|causal|window");
    } else if (key == "wl") c.window_left = parse_int(token, value);
    else if (key == "wr") c.window_right = parse_int(token, value);
    else if (key == "align") {
      if (value == "bottom_right") c.alignment = MaskAlignment::bottom_right;
      else if (value == "top_left") c.alignment = MaskAlignment::top_left;
      else bad_token(token, "align=bottom_right|top_left");
    } else if (key == "softcap") c.softcap = parse_float(token, value);
    else if (key == "scale") c.softmax_scale = parse_float(token, value);
    else if (key == "qk_std") c.qk_std = parse_float(token, value);
    else if (key == "layout") {
      if (value == "strided") c.strided = true;
      else if (value == "contiguous") c.strided = false;
      else bad_token(token, "layout=contiguous|strided");
    } else if (key == "det") c.deterministic = parse_int(token, value) != 0;
    else if (key == "threads") c.num_threads = static_cast<int>(parse_int(token, value));
    else if (key == "seed") c.seed = static_cast<std::uint64_t>(parse_int(token, value));
    else bad_token(token, "one of b sq sk h hkv d lens_q lens_k dtype mask wl wr align softcap "
                          "scale qk_std layout det threads seed");
  }
  if (c.seqlens_q.size() != c.seqlens_k.size()) {
    bad_token(text, "lens_q and lens_k of equal counts (both or neither)");
  }
  if (c.is_varlen()) c.batch = static_cast<std::int64_t>(c.seqlens_q.size());
  return c;
}

Case random_case(std::uint64_t seed, const CaseLimits& limits) {
  Random rng(seed * 0x2545f4914f6cdd1dull + 0x1234567ull);
  const std::int64_t odd_sizes[] = {1, 7, 63, 65, 1000};
  auto pick_len = [&]() -> std::int64_t {
    if (rng.chance(0.4)) return odd_sizes[rng.range(0, limits.allow_long ? 4 : 3)];
    return rng.range(1, limits.max_seqlen);
  };
  Case c;
  c.dtype = limits.dtypes[static_cast<std::size_t>(rng.range(0, static_cast<std::int64_t>(limits.dtypes.size()) - 1))];
  const std::int64_t head_dims[] = {8, 16, 24, 32, 40, 64, 64, 72, 96, 128, 128, 160, 256};
  c.head_dim = limits.head_dims.empty()
                   ? rng.pick(head_dims)
                   : limits.head_dims[static_cast<std::size_t>(rng.range(0, static_cast<std::int64_t>(limits.head_dims.size()) - 1))];
  const bool may_shrink_head_dim =
      limits.head_dims.empty() ||
      std::find(limits.head_dims.begin(), limits.head_dims.end(), 64) != limits.head_dims.end();

  // Heads: GQA ratio 1, 2 or 4 over 1-3 KV heads, or MQA (one KV head, 2-8 query heads).
  if (rng.chance(0.2)) {
    c.num_kv_heads = 1;
    c.num_heads = rng.range(2, 8);
  } else {
    const std::int64_t ratios[] = {1, 2, 4};
    c.num_kv_heads = rng.range(1, 3);
    c.num_heads = c.num_kv_heads * rng.pick(ratios);
  }

  // Lengths: varlen with empty and length-1 sequences, or a padded batch.
  if (rng.chance(0.3)) {
    const std::int64_t seqs = rng.range(1, 5);
    const bool same_lengths = rng.chance(0.3);
    for (std::int64_t b = 0; b < seqs; ++b) {
      auto varlen_len = [&]() -> std::int32_t {
        if (rng.chance(0.15)) return 0;
        if (rng.chance(0.15)) return 1;
        return static_cast<std::int32_t>(pick_len());
      };
      const std::int32_t lq = varlen_len();
      c.seqlens_q.push_back(lq);
      c.seqlens_k.push_back(same_lengths ? lq : varlen_len());
    }
    c.batch = seqs;
  } else {
    c.batch = rng.range(1, 3);
    c.seqlen_q = pick_len();
    c.seqlen_k = rng.chance(0.2) ? c.seqlen_q : pick_len();
  }

  // Masks: none, causal, causal with a left window (sliding), or a general window.
  const std::int64_t longest = std::max(c.seqlen_q, c.seqlen_k) + 3;
  auto window = [&]() -> std::int64_t {
    const std::int64_t picks[] = {-1, 0, 1, 3, 17};
    return rng.chance(0.6) ? rng.pick(picks) : rng.range(0, longest);
  };
  const double mask_kind = rng.uniform();
  if (mask_kind < 0.25) {
    c.causal = true;
  } else if (mask_kind < 0.4) {
    c.causal = true;
    c.window_left = rng.range(0, longest);
  } else if (mask_kind < 0.7) {
    c.window_left = window();
    c.window_right = window();
  }
  c.alignment = rng.chance(0.5) ? MaskAlignment::bottom_right : MaskAlignment::top_left;

  if (rng.chance(0.3)) {
    const float caps[] = {1.0f, 5.0f, 30.0f};
    c.softcap = rng.pick(caps);
  }
  if (rng.chance(0.25)) {  // scale * sqrt(D) in [0.3, 3]
    c.softmax_scale = static_cast<float>((0.3 + 2.7 * rng.uniform()) /
                                         std::sqrt(static_cast<double>(c.head_dim)));
  }
  if (rng.chance(0.2)) c.qk_std = 2.0f;
  c.strided = limits.allow_strided && rng.chance(0.4);
  c.deterministic = rng.chance(0.5);
  const int threads[] = {0, 0, 1, 2};
  c.num_threads = rng.pick(threads);
  c.seed = rng.next() >> 1;  // parse_case reads it back as a signed 64-bit integer

  // Keep the float64 oracle affordable: shrink batch, heads, head_dim, then lengths.
  auto work = [&c]() {
    std::int64_t w = 0;
    if (c.is_varlen()) {
      for (std::size_t b = 0; b < c.seqlens_q.size(); ++b)
        w += std::int64_t{c.seqlens_q[b]} * std::max<std::int32_t>(c.seqlens_k[b], 1);
    } else {
      w = c.batch * c.seqlen_q * std::max<std::int64_t>(c.seqlen_k, 1);
    }
    return w * c.num_heads * c.head_dim;
  };
  while (work() > limits.max_work) {
    if (!c.is_varlen() && c.batch > 1) {
      --c.batch;
    } else if (c.num_kv_heads > 1) {
      const std::int64_t ratio = c.num_heads / c.num_kv_heads;
      --c.num_kv_heads;
      c.num_heads = c.num_kv_heads * ratio;
    } else if (c.head_dim > 64 && may_shrink_head_dim) {
      c.head_dim = 64;
    } else if (c.is_varlen() && c.seqlens_q.size() > 1) {
      c.seqlens_q.pop_back();
      c.seqlens_k.pop_back();
      c.batch = static_cast<std::int64_t>(c.seqlens_q.size());
    } else if (c.is_varlen()) {
      c.seqlens_q[0] = std::max(1, c.seqlens_q[0] / 2);
      c.seqlens_k[0] = std::max(1, c.seqlens_k[0] / 2);
    } else if (c.seqlen_q >= c.seqlen_k) {
      c.seqlen_q = std::max<std::int64_t>(1, c.seqlen_q / 2);
    } else {
      c.seqlen_k = std::max<std::int64_t>(1, c.seqlen_k / 2);
    }
  }
  return c;
}

double attention_flops(const Case& c, bool backward) {
  const std::int64_t seqs = c.effective_batch();
  double pairs = 0.0;
  for (std::int64_t b = 0; b < seqs; ++b) {
    const std::int64_t lq = c.is_varlen() ? c.seqlens_q[static_cast<std::size_t>(b)] : c.seqlen_q;
    const std::int64_t lk = c.is_varlen() ? c.seqlens_k[static_cast<std::size_t>(b)] : c.seqlen_k;
    SequenceMask m;
    m.left = c.window_left;
    m.right = c.causal ? 0 : c.window_right;
    m.offset = c.alignment == MaskAlignment::bottom_right ? lk - lq : 0;
    m.seqlen_k = lk;
    for (std::int64_t i = 0; i < lq; ++i) {
      const std::int64_t lo = m.key_begin(i), hi = m.key_end(i + 1);
      if (hi > lo) pairs += static_cast<double>(hi - lo);
    }
  }
  const double fwd = 4.0 * pairs * static_cast<double>(c.head_dim * c.num_heads);
  return backward ? 2.5 * fwd : fwd;
}

}  // namespace fastattn::harness
