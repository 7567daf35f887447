// check.cpp — run a backend on a Case and judge it against the float64 oracle (harness.hpp).
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "fastattn/error.hpp"
#include "harness/harness.hpp"
#include "harness/judge.hpp"
#include "harness/naive.hpp"
#include "harness/tensors.hpp"
#include "reference/reference.hpp"

namespace fastattn::harness {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// out rows (token, head) whose reference lse is -inf must be exactly zero.
std::int64_t nonzero_masked_rows(const std::vector<double>& out, const std::vector<double>& lse_ref,
                                 std::int64_t total_q, std::int64_t heads, std::int64_t d) {
  std::int64_t n = 0;
  for (std::int64_t token = 0; token < total_q; ++token)
    for (std::int64_t h = 0; h < heads; ++h) {
      if (lse_ref[static_cast<std::size_t>(h * total_q + token)] != -kInf) continue;
      for (std::int64_t c = 0; c < d; ++c)
        if (out[static_cast<std::size_t>((token * heads + h) * d + c)] != 0.0) {
          ++n;
          break;
        }
    }
  return n;
}

std::string format_stats(const ErrorStats& e) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g/%.3g", e.max_abs, e.rel_fro);
  return buf;
}

}  // namespace

std::string TensorCheck::to_string() const {
  std::string s = std::string(pass ? "  ok   " : "  FAIL ") + name + ": max_abs/rel_fro " +
                  format_stats(backend) + " (bound " + format_stats(bound) + ", naive " +
                  format_stats(naive) + ")";
  if (worst_row >= 0) s += " max_abs row " + std::to_string(worst_row);
  if (unwritten) s += " unwritten=" + std::to_string(unwritten);
  if (non_finite) s += " non_finite=" + std::to_string(non_finite);
  if (padding_clobbered) s += " padding_clobbered=" + std::to_string(padding_clobbered);
  if (masked_rows_wrong) s += " masked_rows_wrong=" + std::to_string(masked_rows_wrong);
  return s;
}

std::string CheckReport::to_string() const {
  std::string s = std::string(pass ? "PASS " : "FAIL ") + fastattn::to_string(backend) + " " +
                  c.to_string();
  if (!forward_choice.kernel.empty()) s += "\n  forward:  " + forward_choice.describe();
  if (!backward_choice.kernel.empty()) s += "\n  backward: " + backward_choice.describe();
  if (!error.empty()) s += "\n  error: " + error;
  for (const TensorCheck& t : tensors) s += "\n" + t.to_string();
  return s;
}

CheckReport check_case(const Case& c, Backend backend, const CheckOptions& options) {
  CheckReport report;
  report.c = c;
  report.backend = backend;
  CaseData data(c);
  const AttentionProblem p = data.problem();
  const std::int64_t heads = c.num_heads, d = c.head_dim;
  const reference::ForwardResult ref = reference::forward_f64(p);
  bool pass = true;
  auto inputs_unchanged = [&](const std::vector<const HostTensor*>& inputs,
                              const std::vector<std::vector<std::uint8_t>>& before) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i]->snapshot() != before[i]) {
        report.error += std::string(report.error.empty() ? "" : "; ") + "an input was modified";
        return false;
      }
    return true;
  };

  if (options.forward) {
    const NaiveForward naive = naive_forward(p);
    const std::vector<const HostTensor*> inputs = {&data.q, &data.k, &data.v};
    std::vector<std::vector<std::uint8_t>> before;
    for (const HostTensor* t : inputs) before.push_back(t->snapshot());
    try {
      report.forward_choice = data.run_forward(backend);
    } catch (const Error& e) {
      report.error = std::string("forward threw ") + fastattn::to_string(e.code()) + ": " + e.what();
      return report;
    }
    pass = inputs_unchanged(inputs, before) && pass;
    const std::vector<double> out = data.out.values();
    TensorCheck out_check = judge_tensor("out", data.out, out, ref.out, naive.out, naive.out_terms, c.dtype, d, false);
    out_check.masked_rows_wrong = nonzero_masked_rows(out, ref.lse, data.total_q(), heads, d);
    out_check.pass = out_check.pass && out_check.masked_rows_wrong == 0;
    report.tensors.push_back(out_check);
    report.tensors.push_back(
        judge_tensor("lse", data.lse, data.lse_values(), ref.lse, naive.lse, naive.lse_terms, c.dtype, d, true));
  }

  if (options.backward) {
    data.set_forward_outputs(ref.out, ref.lse);
    const reference::BackwardResult grad = reference::backward_f64(p);
    const NaiveBackward naive = naive_backward(p);
    const std::vector<const HostTensor*> inputs = {&data.q, &data.k, &data.v, &data.dout,
                                                   &data.out, &data.lse};
    std::vector<std::vector<std::uint8_t>> before;
    for (const HostTensor* t : inputs) before.push_back(t->snapshot());
    try {
      report.backward_choice = data.run_backward(backend);
    } catch (const Error& e) {
      report.error = std::string("backward threw ") + fastattn::to_string(e.code()) + ": " + e.what();
      return report;
    }
    pass = inputs_unchanged(inputs, before) && pass;
    report.tensors.push_back(judge_tensor("dq", data.dq, data.dq.values(), grad.dq, naive.dq, naive.dq_terms,
                                          c.dtype, d, false));
    report.tensors.push_back(judge_tensor("dk", data.dk, data.dk.values(), grad.dk, naive.dk, naive.dk_terms,
                                          c.dtype, d, false));
    report.tensors.push_back(judge_tensor("dv", data.dv, data.dv.values(), grad.dv, naive.dv, naive.dv_terms,
                                          c.dtype, d, false));
  }
  // A check that compared nothing proves nothing: it fails.
  if (report.tensors.empty()) {
    report.error = "checked no tensor (neither the forward nor the backward was requested)";
    pass = false;
  }
  for (const TensorCheck& t : report.tensors) pass = pass && t.pass;
  report.pass = pass;
  return report;
}

}  // namespace fastattn::harness
