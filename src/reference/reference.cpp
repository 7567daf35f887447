// reference.cpp — float64 attention that materialises the score matrix, forward and backward.
//
// Every (batch, head) is handled on its own: its query, key and value rows are gathered into
// contiguous float64 matrices (inputs are read exactly: f16/bf16 values are representable in
// float64), the full score matrix is formed, masked with SequenceMask::visible and soft-maxed.
// Nothing here is tiled or fused, so the code reads like the formulas in HELPERS_CONTEXT.md and
// problem.hpp; it is the oracle the CPU/CUDA kernels and `fastattn check` are measured against.
#include "reference/reference.hpp"

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/dtype.hpp"

namespace fastattn::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Global token index of (sequence b, token t) in the float64 result layout.
std::int64_t q_token(const AttentionProblem& p, std::int64_t b, std::int64_t t) {
  return (p.is_varlen() ? p.q_start(b) : b * p.seqlen_q) + t;
}
std::int64_t k_token(const AttentionProblem& p, std::int64_t b, std::int64_t t) {
  return (p.is_varlen() ? p.k_start(b) : b * p.seqlen_k) + t;
}

// rows x head_dim float64 copy of one head of a query-side operand (q, out, dout).
std::vector<double> gather_q_side(const AttentionProblem& p, const Operand& op, std::int64_t b,
                                  std::int64_t h, std::int64_t rows) {
  const std::int64_t d = p.head_dim;
  std::vector<double> m(static_cast<std::size_t>(rows * d));
  for (std::int64_t t = 0; t < rows; ++t) {
    const std::int64_t base = p.offset_q(op, b, t, h);
    for (std::int64_t c = 0; c < d; ++c) m[t * d + c] = load_element(op.data, p.dtype, base + c);
  }
  return m;
}
// rows x head_dim float64 copy of one KV head of a key-side operand (k, v).
std::vector<double> gather_k_side(const AttentionProblem& p, const Operand& op, std::int64_t b,
                                  std::int64_t kvh, std::int64_t rows) {
  const std::int64_t d = p.head_dim;
  std::vector<double> m(static_cast<std::size_t>(rows * d));
  for (std::int64_t t = 0; t < rows; ++t) {
    const std::int64_t base = p.offset_k(op, b, t, kvh);
    for (std::int64_t c = 0; c < d; ++c) m[t * d + c] = load_element(op.data, p.dtype, base + c);
  }
  return m;
}

double dot(const double* a, const double* b, std::int64_t n) {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The softmax of one (batch, head): probabilities, their row log-sum-exps and, with softcap,
// tanh of each capped logit (needed by the backward pass).
struct HeadSoftmax {
  std::int64_t len_q = 0, len_k = 0;
  std::vector<double> prob;     // (len_q, len_k): P_ij, 0 where masked
  std::vector<double> tanh_s;   // (len_q, len_k): tanh(scale q.k / softcap); empty without softcap
  std::vector<double> lse;      // (len_q): -inf for rows that see no key
};

HeadSoftmax softmax_of_head(const AttentionProblem& p, const std::vector<double>& q,
                            const std::vector<double>& k, std::int64_t len_q, std::int64_t len_k) {
  const std::int64_t d = p.head_dim;
  const double scale = p.softmax_scale;
  const double cap = p.softcap;
  const SequenceMask mask = p.mask_for(len_q, len_k);
  HeadSoftmax s;
  s.len_q = len_q;
  s.len_k = len_k;
  s.prob.assign(static_cast<std::size_t>(len_q * len_k), 0.0);
  if (cap > 0.0) s.tanh_s.assign(static_cast<std::size_t>(len_q * len_k), 0.0);
  s.lse.assign(static_cast<std::size_t>(len_q), kNegInf);
  std::vector<double> score(static_cast<std::size_t>(len_k));
  for (std::int64_t i = 0; i < len_q; ++i) {
    double row_max = kNegInf;
    for (std::int64_t j = 0; j < len_k; ++j) {
      if (!mask.visible(i, j)) {
        score[j] = kNegInf;
        continue;
      }
      double x = scale * dot(&q[i * d], &k[j * d], d);
      if (cap > 0.0) {
        const double t = std::tanh(x / cap);
        s.tanh_s[i * len_k + j] = t;
        x = cap * t;
      }
      score[j] = x;
      if (x > row_max) row_max = x;
    }
    if (row_max == kNegInf) continue;  // the row sees no key: P = 0, lse = -inf
    double sum = 0.0;
    for (std::int64_t j = 0; j < len_k; ++j) {
      if (score[j] == kNegInf) continue;
      const double e = std::exp(score[j] - row_max);
      s.prob[i * len_k + j] = e;
      sum += e;
    }
    for (std::int64_t j = 0; j < len_k; ++j) s.prob[i * len_k + j] /= sum;
    s.lse[i] = row_max + std::log(sum);
  }
  return s;
}

// out (len_q, head_dim) = P V.
std::vector<double> apply_values(const HeadSoftmax& s, const std::vector<double>& v,
                                 std::int64_t d) {
  std::vector<double> out(static_cast<std::size_t>(s.len_q * d), 0.0);
  for (std::int64_t i = 0; i < s.len_q; ++i)
    for (std::int64_t j = 0; j < s.len_k; ++j) {
      const double pij = s.prob[i * s.len_k + j];
      if (pij == 0.0) continue;
      for (std::int64_t c = 0; c < d; ++c) out[i * d + c] += pij * v[j * d + c];
    }
  return out;
}

int thread_count(const AttentionProblem& p) {
  return p.num_threads > 0 ? p.num_threads : omp_get_max_threads();
}

}  // namespace

ForwardResult forward_f64(const AttentionProblem& p) {
  const std::int64_t d = p.head_dim, heads = p.num_heads;
  ForwardResult r;
  r.out.assign(static_cast<std::size_t>(p.total_q * heads * d), 0.0);
  r.lse.assign(static_cast<std::size_t>(heads * p.total_q), kNegInf);
  const std::int64_t units = p.batch * heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(thread_count(p))
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t b = u / heads, h = u % heads, kvh = h / p.group_size();
    const std::int64_t len_q = p.q_len(b), len_k = p.k_len(b);
    if (len_q == 0) continue;
    const std::vector<double> q = gather_q_side(p, p.q, b, h, len_q);
    const std::vector<double> k = gather_k_side(p, p.k, b, kvh, len_k);
    const std::vector<double> v = gather_k_side(p, p.v, b, kvh, len_k);
    const HeadSoftmax s = softmax_of_head(p, q, k, len_q, len_k);
    const std::vector<double> out = apply_values(s, v, d);
    for (std::int64_t t = 0; t < len_q; ++t) {
      const std::int64_t token = q_token(p, b, t);
      for (std::int64_t c = 0; c < d; ++c) r.out[(token * heads + h) * d + c] = out[t * d + c];
      r.lse[h * p.total_q + token] = s.lse[t];
    }
  }
  return r;
}

BackwardResult backward_f64(const AttentionProblem& p) {
  const std::int64_t d = p.head_dim, heads = p.num_heads, kv_heads = p.num_kv_heads;
  const std::int64_t group = p.group_size();
  const double scale = p.softmax_scale;
  BackwardResult r;
  r.dq.assign(static_cast<std::size_t>(p.total_q * heads * d), 0.0);
  r.dk.assign(static_cast<std::size_t>(p.total_k * kv_heads * d), 0.0);
  r.dv.assign(static_cast<std::size_t>(p.total_k * kv_heads * d), 0.0);
  // One unit per (batch, KV head): it owns dk/dv of that head and dq of its query heads.
  const std::int64_t units = p.batch * kv_heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(thread_count(p))
  for (std::int64_t u = 0; u < units; ++u) {
    const std::int64_t b = u / kv_heads, kvh = u % kv_heads;
    const std::int64_t len_q = p.q_len(b), len_k = p.k_len(b);
    if (len_q == 0 || len_k == 0) continue;  // no visible pair: every gradient is 0
    const std::vector<double> k = gather_k_side(p, p.k, b, kvh, len_k);
    const std::vector<double> v = gather_k_side(p, p.v, b, kvh, len_k);
    std::vector<double> dk(static_cast<std::size_t>(len_k * d), 0.0);
    std::vector<double> dv(static_cast<std::size_t>(len_k * d), 0.0);
    for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const std::vector<double> q = gather_q_side(p, p.q, b, h, len_q);
      const std::vector<double> dout = gather_q_side(p, p.dout, b, h, len_q);
      const HeadSoftmax s = softmax_of_head(p, q, k, len_q, len_k);
      const std::vector<double> out = apply_values(s, v, d);
      std::vector<double> dq(static_cast<std::size_t>(len_q * d), 0.0);
      for (std::int64_t i = 0; i < len_q; ++i) {
        const double delta = dot(&dout[i * d], &out[i * d], d);  // D_i = dout_i . out_i
        for (std::int64_t j = 0; j < len_k; ++j) {
          const double pij = s.prob[i * len_k + j];
          if (pij == 0.0) continue;
          const double dp = dot(&dout[i * d], &v[j * d], d);  // dP_ij = dout_i . v_j
          double ds = pij * (dp - delta);                      // dS_ij = P_ij (dP_ij - D_i)
          if (!s.tanh_s.empty()) {                             // through the soft-cap
            const double t = s.tanh_s[i * len_k + j];
            ds *= 1.0 - t * t;
          }
          for (std::int64_t c = 0; c < d; ++c) {
            dq[i * d + c] += scale * ds * k[j * d + c];
            dk[j * d + c] += scale * ds * q[i * d + c];
            dv[j * d + c] += pij * dout[i * d + c];
          }
        }
      }
      for (std::int64_t t = 0; t < len_q; ++t) {
        const std::int64_t token = q_token(p, b, t);
        for (std::int64_t c = 0; c < d; ++c) r.dq[(token * heads + h) * d + c] = dq[t * d + c];
      }
    }
    for (std::int64_t t = 0; t < len_k; ++t) {
      const std::int64_t token = k_token(p, b, t);
      for (std::int64_t c = 0; c < d; ++c) {
        r.dk[(token * kv_heads + kvh) * d + c] = dk[t * d + c];
        r.dv[(token * kv_heads + kvh) * d + c] = dv[t * d + c];
      }
    }
  }
  return r;
}

void forward(const AttentionProblem& p) {
  const ForwardResult r = forward_f64(p);
  const std::int64_t d = p.head_dim, heads = p.num_heads;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t t = 0; t < p.q_len(b); ++t) {
      const std::int64_t token = q_token(p, b, t);
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t base = p.offset_q(p.out, b, t, h);
        for (std::int64_t c = 0; c < d; ++c)
          store_element(p.out.data, p.dtype, base + c, r.out[(token * heads + h) * d + c]);
        if (p.lse != nullptr)
          p.lse_row(b, h)[t * p.lse_token_stride] =
              static_cast<float>(r.lse[h * p.total_q + token]);
      }
    }
  }
}

void backward(const AttentionProblem& p) {
  const BackwardResult r = backward_f64(p);
  const std::int64_t d = p.head_dim, heads = p.num_heads, kv_heads = p.num_kv_heads;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t t = 0; t < p.q_len(b); ++t) {
      const std::int64_t token = q_token(p, b, t);
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t base = p.offset_q(p.dq, b, t, h);
        for (std::int64_t c = 0; c < d; ++c)
          store_element(p.dq.data, p.dtype, base + c, r.dq[(token * heads + h) * d + c]);
      }
    }
    for (std::int64_t t = 0; t < p.k_len(b); ++t) {
      const std::int64_t token = k_token(p, b, t);
      for (std::int64_t h = 0; h < kv_heads; ++h) {
        const std::int64_t dk_base = p.offset_k(p.dk, b, t, h);
        const std::int64_t dv_base = p.offset_k(p.dv, b, t, h);
        for (std::int64_t c = 0; c < d; ++c) {
          store_element(p.dk.data, p.dtype, dk_base + c, r.dk[(token * kv_heads + h) * d + c]);
          store_element(p.dv.data, p.dtype, dv_base + c, r.dv[(token * kv_heads + h) * d + c]);
        }
      }
    }
  }
}

}  // namespace fastattn::reference
