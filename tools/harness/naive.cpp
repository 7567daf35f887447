// naive.cpp — f32 attention with a materialised score matrix (see naive.hpp).
#include "harness/naive.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/dtype.hpp"
#include "harness/tensors.hpp"

namespace fastattn::harness {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

using Matrix = std::vector<float>;  // (rows, head_dim), row-major

Matrix gather(const AttentionProblem& p, const Operand& op, std::int64_t b, std::int64_t head,
              std::int64_t rows, bool key_side) {
  const std::int64_t d = p.head_dim;
  Matrix m(static_cast<std::size_t>(rows * d));
  for (std::int64_t t = 0; t < rows; ++t) {
    const std::int64_t base = key_side ? p.offset_k(op, b, t, head) : p.offset_q(op, b, t, head);
    for (std::int64_t c = 0; c < d; ++c)
      m[static_cast<std::size_t>(t * d + c)] =
          static_cast<float>(load_element(op.data, p.dtype, base + c));
  }
  return m;
}

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Scores of one (batch, head) in f32: scale * q.k, soft-capped; -inf where masked.
// tanh_s receives tanh(scale q.k / cap) when soft-capping.
Matrix scores(const AttentionProblem& p, const Matrix& q, const Matrix& k, std::int64_t len_q,
              std::int64_t len_k, Matrix* tanh_s) {
  const std::int64_t d = p.head_dim;
  const SequenceMask mask = p.mask_for(len_q, len_k);
  Matrix s(static_cast<std::size_t>(len_q * len_k), kNegInf);
  if (tanh_s) tanh_s->assign(s.size(), 0.0f);
  for (std::int64_t i = 0; i < len_q; ++i)
    for (std::int64_t j = 0; j < len_k; ++j) {
      if (!mask.visible(i, j)) continue;
      float x = p.softmax_scale * dot(&q[static_cast<std::size_t>(i * d)], &k[static_cast<std::size_t>(j * d)], d);
      if (p.softcap > 0.0f) {
        const float t = std::tanh(x / p.softcap);
        if (tanh_s) (*tanh_s)[static_cast<std::size_t>(i * len_k + j)] = t;
        x = p.softcap * t;
      }
      s[static_cast<std::size_t>(i * len_k + j)] = x;
    }
  return s;
}

// Largest |scale| * sum_c |q_ic k_jc| over the keys row i sees: the scale of its score errors.
double max_abs_score(const AttentionProblem& p, const Matrix& q, const Matrix& k, std::int64_t i,
                     std::int64_t len_k) {
  const std::int64_t d = p.head_dim;
  const SequenceMask mask = p.mask_for(static_cast<std::int64_t>(q.size()) / d, len_k);
  double best = 0.0;
  for (std::int64_t j = 0; j < len_k; ++j) {
    if (!mask.visible(i, j)) continue;
    double s = 0.0;
    for (std::int64_t c = 0; c < d; ++c)
      s += std::fabs(static_cast<double>(q[static_cast<std::size_t>(i * d + c)]) * k[static_cast<std::size_t>(j * d + c)]);
    best = std::max(best, s * std::fabs(static_cast<double>(p.softmax_scale)));
  }
  return best;
}

std::int64_t q_token(const AttentionProblem& p, std::int64_t b, std::int64_t t) {
  return (p.is_varlen() ? p.q_start(b) : b * p.seqlen_q) + t;
}
std::int64_t k_token(const AttentionProblem& p, std::int64_t b, std::int64_t t) {
  return (p.is_varlen() ? p.k_start(b) : b * p.seqlen_k) + t;
}

// The value a dtype output holds after rounding, as a double.
double rounded(DType dtype, float x) {
  switch (dtype) {
    case DType::f16: return f16_to_float(float_to_f16(x));
    case DType::bf16: return bf16_to_float(float_to_bf16(x));
    default: return x;
  }
}

}  // namespace

NaiveForward naive_forward(const AttentionProblem& p) {
  const std::int64_t d = p.head_dim, heads = p.num_heads;
  NaiveForward r;
  r.out.assign(static_cast<std::size_t>(p.total_q * heads * d), 0.0);
  r.lse.assign(static_cast<std::size_t>(heads * p.total_q), -std::numeric_limits<double>::infinity());
  r.out_terms.assign(r.out.size(), 0.0);
  r.lse_terms.assign(r.lse.size(), 1.0);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len_q = p.q_len(b), len_k = p.k_len(b);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kvh = h / p.group_size();
      const Matrix q = gather(p, p.q, b, h, len_q, false);
      const Matrix k = gather(p, p.k, b, kvh, len_k, true);
      const Matrix v = gather(p, p.v, b, kvh, len_k, true);
      Matrix s = scores(p, q, k, len_q, len_k, nullptr);
      for (std::int64_t i = 0; i < len_q; ++i) {
        float* row = s.data() + i * len_k;  // (no operator[]: s is empty when len_k == 0)
        float row_max = kNegInf;
        for (std::int64_t j = 0; j < len_k; ++j) row_max = std::max(row_max, row[j]);
        if (row_max == kNegInf) continue;  // no visible key: out 0, lse -inf
        float sum = 0.0f;
        for (std::int64_t j = 0; j < len_k; ++j) {
          row[j] = row[j] == kNegInf ? 0.0f : std::exp(row[j] - row_max);
          sum += row[j];
        }
        std::vector<float> o(static_cast<std::size_t>(d), 0.0f), o_terms(o.size(), 0.0f);
        for (std::int64_t j = 0; j < len_k; ++j) {
          const float pij = row[j] / sum;
          if (pij == 0.0f) continue;
          for (std::int64_t c = 0; c < d; ++c) {
            const float vjc = v[static_cast<std::size_t>(j * d + c)];
            o[static_cast<std::size_t>(c)] += pij * vjc;
            o_terms[static_cast<std::size_t>(c)] += pij * std::fabs(vjc);
          }
        }
        const std::int64_t token = q_token(p, b, i);
        for (std::int64_t c = 0; c < d; ++c) {
          const std::size_t at = static_cast<std::size_t>((token * heads + h) * d + c);
          r.out[at] = rounded(p.dtype, o[static_cast<std::size_t>(c)]);
          r.out_terms[at] = o_terms[static_cast<std::size_t>(c)];
        }
        const std::size_t at = static_cast<std::size_t>(h * p.total_q + token);
        r.lse[at] = row_max + std::log(sum);
        r.lse_terms[at] = std::max(1.0, max_abs_score(p, q, k, i, len_k));
      }
    }
  }
  return r;
}

NaiveBackward naive_backward(const AttentionProblem& p) {
  const std::int64_t d = p.head_dim, heads = p.num_heads, kv_heads = p.num_kv_heads;
  const float scale = p.softmax_scale;
  NaiveBackward r;
  r.dq.assign(static_cast<std::size_t>(p.total_q * heads * d), 0.0);
  r.dk.assign(static_cast<std::size_t>(p.total_k * kv_heads * d), 0.0);
  r.dv.assign(static_cast<std::size_t>(p.total_k * kv_heads * d), 0.0);
  r.dq_terms.assign(r.dq.size(), 0.0);
  r.dk_terms.assign(r.dk.size(), 0.0);
  r.dv_terms.assign(r.dv.size(), 0.0);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const std::int64_t len_q = p.q_len(b), len_k = p.k_len(b);
    for (std::int64_t kvh = 0; kvh < kv_heads; ++kvh) {
      const Matrix k = gather(p, p.k, b, kvh, len_k, true);
      const Matrix v = gather(p, p.v, b, kvh, len_k, true);
      Matrix dk(k.size(), 0.0f), dv(v.size(), 0.0f);
      Matrix dk_terms(k.size(), 0.0f), dv_terms(v.size(), 0.0f);
      Matrix dq, dq_terms;  // of one query head at a time
      for (std::int64_t h = kvh * p.group_size(); h < (kvh + 1) * p.group_size(); ++h) {
        const Matrix q = gather(p, p.q, b, h, len_q, false);
        const Matrix out = gather(p, p.out, b, h, len_q, false);
        const Matrix dout = gather(p, p.dout, b, h, len_q, false);
        Matrix tanh_s;
        const Matrix s = scores(p, q, k, len_q, len_k, p.softcap > 0.0f ? &tanh_s : nullptr);
        const float* lse = p.lse_row(b, h);
        dq.assign(q.size(), 0.0f);
        dq_terms.assign(q.size(), 0.0f);
        for (std::int64_t i = 0; i < len_q; ++i) {
          const float lse_i = lse[i * p.lse_token_stride];
          if (lse_i == kNegInf) continue;
          const float* dout_i = &dout[static_cast<std::size_t>(i * d)];
          const float delta = dot(dout_i, &out[static_cast<std::size_t>(i * d)], d);
          for (std::int64_t j = 0; j < len_k; ++j) {
            const float sij = s[static_cast<std::size_t>(i * len_k + j)];
            if (sij == kNegInf) continue;
            const float pij = std::exp(sij - lse_i);
            const float dp = dot(dout_i, &v[static_cast<std::size_t>(j * d)], d);
            float ds = pij * (dp - delta);
            float ds_terms = pij * (std::fabs(dp) + std::fabs(delta));
            if (!tanh_s.empty()) {
              const float t = tanh_s[static_cast<std::size_t>(i * len_k + j)];
              ds *= 1.0f - t * t;
              ds_terms *= 1.0f - t * t;
            }
            const float scaled = scale * ds, scaled_terms = std::fabs(scale) * ds_terms;
            for (std::int64_t c = 0; c < d; ++c) {
              const std::size_t ic = static_cast<std::size_t>(i * d + c), jc = static_cast<std::size_t>(j * d + c);
              dq[ic] += scaled * k[jc];
              dk[jc] += scaled * q[ic];
              dv[jc] += pij * dout_i[c];
              dq_terms[ic] += scaled_terms * std::fabs(k[jc]);
              dk_terms[jc] += scaled_terms * std::fabs(q[ic]);
              dv_terms[jc] += pij * std::fabs(dout_i[c]);
            }
          }
        }
        for (std::int64_t t = 0; t < len_q; ++t) {
          const std::int64_t token = q_token(p, b, t);
          for (std::int64_t c = 0; c < d; ++c) {
            const std::size_t at = static_cast<std::size_t>((token * heads + h) * d + c);
            r.dq[at] = rounded(p.dtype, dq[static_cast<std::size_t>(t * d + c)]);
            r.dq_terms[at] = dq_terms[static_cast<std::size_t>(t * d + c)];
          }
        }
      }
      for (std::int64_t t = 0; t < len_k; ++t) {
        const std::int64_t token = k_token(p, b, t);
        for (std::int64_t c = 0; c < d; ++c) {
          const std::size_t at = static_cast<std::size_t>((token * kv_heads + kvh) * d + c);
          r.dk[at] = rounded(p.dtype, dk[static_cast<std::size_t>(t * d + c)]);
          r.dv[at] = rounded(p.dtype, dv[static_cast<std::size_t>(t * d + c)]);
          r.dk_terms[at] = dk_terms[static_cast<std::size_t>(t * d + c)];
          r.dv_terms[at] = dv_terms[static_cast<std::size_t>(t * d + c)];
        }
      }
    }
  }
  return r;
}

}  // namespace fastattn::harness
