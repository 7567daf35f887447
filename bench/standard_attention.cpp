// standard_attention.cpp — materialised-score attention on OpenBLAS sgemm.
#include "standard_attention.hpp"

#include <cblas.h>
#include <omp.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/mask.hpp"
#include "process_memory.hpp"
#include "row_pool.hpp"
#include "row_softmax.hpp"

namespace fastattn::bench {

namespace {

int g_threads = 1;
std::unique_ptr<RowPool> g_pool;  // g_threads threads for the row loops

// Row strides of [batch, seqlen, heads, head_dim] tensors, and the element offset of the
// first row of (b, h).
struct Layout {
  std::int64_t row;    // heads * head_dim
  std::int64_t batch;  // seqlen * row
  std::int64_t head_dim;
  std::int64_t at(std::int64_t b, std::int64_t h) const { return b * batch + h * head_dim; }
};

void require_supported(const perf::BenchShape& s) {
  if (s.dtype != DType::f32 || s.softcap > 0)
    throw Error(ErrorCode::unsupported,
                "standard attention baseline: expected an f32 shape without soft-cap, got " +
                    s.label() + " " + s.mask_label());
}

SequenceMask mask_of(const perf::BenchShape& s) {
  SequenceMask m;
  m.left = s.window_left;
  m.right = s.causal ? 0 : s.window_right;
  m.offset = s.seqlen_k - s.seqlen_q;
  m.seqlen_k = s.seqlen_k;
  return m;
}

// One row of P = softmax(S) in place over the visible keys [begin, end); the rest become 0.
// A row that sees no key is all zeros (like fastattn: out = 0).
void softmax_row(float* s, std::int64_t cols, std::int64_t begin, std::int64_t end) {
  const float max = row_max(s + begin, end - begin);
  const float sum = end > begin ? exp_shifted_sum(s + begin, end - begin, max) : 0.0f;
  scale_row(s + begin, end - begin, sum > 0.0f ? 1.0f / sum : 0.0f);
  for (std::int64_t j = 0; j < begin; ++j) s[j] = 0.0f;
  for (std::int64_t j = end; j < cols; ++j) s[j] = 0.0f;
}

// S: (rows, cols) f32, row-major; becomes P.
void masked_softmax(float* S, std::int64_t rows, std::int64_t cols, const SequenceMask& mask,
                    bool masked) {
  g_pool->parallel_for(rows, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) {
      const std::int64_t begin = masked ? mask.key_begin(i) : 0;
      const std::int64_t end = masked ? std::max(begin, mask.key_end(i + 1)) : cols;
      softmax_row(S + i * cols, cols, begin, end);
    }
  });
}

// One row of dS = P * (dP - D) written over dP, where D = dO_i . O_i (head_dim long).
void softmax_gradient_row(const float* p, float* dp, std::int64_t cols, const float* o,
                          const float* dout_row, std::int64_t head_dim) {
  float d = 0.0f;
  for (std::int64_t c = 0; c < head_dim; ++c) d += o[c] * dout_row[c];
  for (std::int64_t j = 0; j < cols; ++j) dp[j] = p[j] * (dp[j] - d);
}

bool has_mask(const perf::BenchShape& s) {
  return s.causal || s.window_left >= 0 || s.window_right >= 0;
}

float softmax_scale(const perf::BenchShape& s) {
  return 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}

// P (seqlen_q x seqlen_k) of head (b, h): S = scale * Q K^T, then the masked softmax.
void probabilities(const perf::BenchShape& s, const float* q, const float* k, const Layout& lq,
                   const Layout& lk, std::int64_t b, std::int64_t h, float* P) {
  const std::int64_t hk = h / (s.heads / s.kv_heads);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(s.seqlen_q),
              static_cast<blasint>(s.seqlen_k), static_cast<blasint>(s.head_dim), softmax_scale(s),
              q + lq.at(b, h), static_cast<blasint>(lq.row), k + lk.at(b, hk),
              static_cast<blasint>(lk.row), 0.0f, P, static_cast<blasint>(s.seqlen_k));
  masked_softmax(P, s.seqlen_q, s.seqlen_k, mask_of(s), has_mask(s));
}

Layout q_layout(const perf::BenchShape& s) {
  return {s.heads * s.head_dim, s.seqlen_q * s.heads * s.head_dim, s.head_dim};
}
Layout k_layout(const perf::BenchShape& s) {
  return {s.kv_heads * s.head_dim, s.seqlen_k * s.kv_heads * s.head_dim, s.head_dim};
}

blasint bi(std::int64_t x) { return static_cast<blasint>(x); }

}  // namespace

const char* openblas_corename() { return openblas_get_corename(); }

const char* better_openblas_coretype(const perf::CpuFeatures& cpu) {
  std::string core = openblas_get_corename();
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool has_avx512_kernels =
      core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
  const bool has_avx2_kernels = has_avx512_kernels || core == "haswell" || core == "zen";
  if (cpu.avx512_core() && !has_avx512_kernels) return "SkylakeX";
  if (cpu.avx2 && cpu.fma && !has_avx2_kernels) return "Haswell";
  return nullptr;
}

void set_baseline_threads(int threads) {
  g_threads = threads > 0 ? threads : omp_get_max_threads();
  openblas_set_num_threads(g_threads);
  if (!g_pool || g_pool->threads() != g_threads) g_pool = std::make_unique<RowPool>(g_threads);
}

void standard_forward(const perf::BenchShape& s, perf::AttentionTensors& t) {
  require_supported(s);
  if (!g_pool) set_baseline_threads(0);
  const Layout lq = q_layout(s), lk = k_layout(s);
  const auto* q = static_cast<const float*>(t.q.data);
  const auto* k = static_cast<const float*>(t.k.data);
  const auto* v = static_cast<const float*>(t.v.data);
  auto* out = static_cast<float*>(t.out.data);
  // P: (seqlen_q, seqlen_k) f32, row-major — the materialised score matrix of one head.
  std::vector<float> P(static_cast<std::size_t>(s.seqlen_q * s.seqlen_k));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t hk = h / (s.heads / s.kv_heads);
      probabilities(s, q, k, lq, lk, b, h, P.data());
      // O_h (seqlen_q, head_dim) = P V_h
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(s.seqlen_q), bi(s.head_dim),
                  bi(s.seqlen_k), 1.0f, P.data(), bi(s.seqlen_k), v + lk.at(b, hk), bi(lk.row),
                  0.0f, out + lq.at(b, h), bi(lq.row));
    }
}

void standard_backward(const perf::BenchShape& s, perf::AttentionTensors& t) {
  require_supported(s);
  if (!g_pool) set_baseline_threads(0);
  const Layout lq = q_layout(s), lk = k_layout(s);
  const auto* q = static_cast<const float*>(t.q.data);
  const auto* k = static_cast<const float*>(t.k.data);
  const auto* v = static_cast<const float*>(t.v.data);
  const auto* out = static_cast<const float*>(t.out.data);
  const auto* dout = static_cast<const float*>(t.dout.data);
  auto* dq = static_cast<float*>(t.dq.data);
  auto* dk = static_cast<float*>(t.dk.data);
  auto* dv = static_cast<float*>(t.dv.data);
  const float scale = softmax_scale(s);
  const std::int64_t group = s.heads / s.kv_heads;
  // P, dP: (seqlen_q, seqlen_k) f32 each, row-major.
  std::vector<float> P(static_cast<std::size_t>(s.seqlen_q * s.seqlen_k));
  std::vector<float> dP(P.size());
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h) {
      const std::int64_t hk = h / group;
      const float beta_kv = h % group == 0 ? 0.0f : 1.0f;  // GQA: sum over the group's heads
      probabilities(s, q, k, lq, lk, b, h, P.data());
      // dV_hk (seqlen_k, d) (+)= P^T dO_h
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(s.seqlen_k), bi(s.head_dim),
                  bi(s.seqlen_q), 1.0f, P.data(), bi(s.seqlen_k), dout + lq.at(b, h), bi(lq.row),
                  beta_kv, dv + lk.at(b, hk), bi(lk.row));
      // dP (seqlen_q, seqlen_k) = dO_h V_hk^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bi(s.seqlen_q), bi(s.seqlen_k),
                  bi(s.head_dim), 1.0f, dout + lq.at(b, h), bi(lq.row), v + lk.at(b, hk),
                  bi(lk.row), 0.0f, dP.data(), bi(s.seqlen_k));
      // dS = P * (dP - D), written over dP, with D_i = dO_i . O_i
      g_pool->parallel_for(s.seqlen_q, [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i)
          softmax_gradient_row(P.data() + i * s.seqlen_k, dP.data() + i * s.seqlen_k, s.seqlen_k,
                               out + lq.at(b, h) + i * lq.row, dout + lq.at(b, h) + i * lq.row,
                               s.head_dim);
      });
      // dQ_h (seqlen_q, d) = scale dS K_hk
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bi(s.seqlen_q), bi(s.head_dim),
                  bi(s.seqlen_k), scale, dP.data(), bi(s.seqlen_k), k + lk.at(b, hk), bi(lk.row),
                  0.0f, dq + lq.at(b, h), bi(lq.row));
      // dK_hk (seqlen_k, d) (+)= scale dS^T Q_h
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, bi(s.seqlen_k), bi(s.head_dim),
                  bi(s.seqlen_q), scale, dP.data(), bi(s.seqlen_k), q + lq.at(b, h), bi(lq.row),
                  beta_kv, dk + lk.at(b, hk), bi(lk.row));
    }
}

perf::BenchResult run_standard_bench(const perf::BenchShape& shape, perf::Pass pass, int threads,
                                     const perf::TimingOptions& timing) {
  require_supported(shape);
  if (pass == perf::Pass::forward_backward)
    throw Error(ErrorCode::unsupported, "standard attention baseline: fwd+bwd is not timed");
  set_baseline_threads(threads);
  perf::BenchResult r;
  r.shape = shape;
  r.pass = pass;
  r.backend = Backend::automatic;  // not a fastattn backend; see kernel.kernel
  r.threads = g_threads;
  perf::AttentionTensors t(shape, pass == perf::Pass::backward);
  r.tensor_bytes = t.bytes();
  r.kernel.kernel = "standard.openblas.sgemm";
  r.kernel.isa = std::string("openblas ") + openblas_get_corename();
  r.kernel.num_threads = g_threads;
  r.kernel.reason = std::string("baseline: materialised scores, OpenBLAS sgemm (") +
                    openblas_get_config() + ", " + std::to_string(openblas_get_num_threads()) +
                    " threads)";
  const perf::PeakMemoryProbe memory;
  if (pass == perf::Pass::forward) {
    r.timing = perf::time_repeated([&] { standard_forward(shape, t); }, timing);
  } else {
    standard_forward(shape, t);  // out for D = rowsum(dO * O); not timed
    r.timing = perf::time_repeated([&] { standard_backward(shape, t); }, timing);
  }
  r.peak_extra_bytes = memory.bytes();
  r.peak_exact = memory.exact();
  r.gflops = perf::pass_flops(shape, pass) / r.timing.median_s / 1e9;
  return r;
}

double baseline_disagreement(int threads) {
  set_baseline_threads(threads);
  double worst = 0.0;
  for (const bool causal : {false, true}) {
    perf::BenchShape s;
    s.batch = 2;
    s.heads = 4;
    s.kv_heads = 2;
    s.head_dim = 64;
    s.seqlen_q = 100;
    s.seqlen_k = 130;
    s.causal = causal;
    perf::AttentionTensors fa(s, true, 7), base(s, true, 7);
    const AttentionOptions o = perf::options_for(s, Backend::cpu, threads);
    fastattn::forward(fa.q, fa.k, fa.v, fa.out, fa.lse, o);
    fastattn::backward(fa.dout, fa.q, fa.k, fa.v, fa.out, fa.lse, fa.dq, fa.dk, fa.dv, o);
    standard_forward(s, base);
    standard_backward(s, base);
    auto compare = [&](const TensorView& x, const TensorView& y) {
      const auto* a = static_cast<const float*>(x.data);
      const auto* b = static_cast<const float*>(y.data);
      double diff = 0.0, scale = 0.0;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
        scale = std::max(scale, static_cast<double>(std::abs(a[i])));
      }
      worst = std::max(worst, scale > 0 ? diff / scale : diff);
    };
    compare(fa.out, base.out);
    compare(fa.dq, base.dq);
    compare(fa.dk, base.dk);
    compare(fa.dv, base.dv);
  }
  return worst;
}

}  // namespace fastattn::bench
