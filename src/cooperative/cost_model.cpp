// cost_model.cpp — the one chooser of the cooperative step's split (fastattn/cooperative.hpp).
//
// A decode step over host pages is a stream of bytes: PCIe moves them to the GPU at pcie_h2d,
// the CPU reads and attends them at min(cpu_attention, host_read_during_dma) (its memory is
// shared with the DMA, hence the rate measured while a copy runs). The two run at once, so the
// host pages are split to make them finish together: x pages streamed at s seconds per page and
// H - x on the CPU at c seconds per page finish together when x = H c / (s + c). The device
// pages run at HBM speed beside them. Prefill (many query rows) turns each part compute-bound,
// and then the device part and the streamed part share one GPU's compute: they run one after the
// other (the copies hide under the compute), so the GPU takes D d + x s and the CPU (H - x) c,
// and x = (H c - D d) / (s + c) makes them finish together. The CPU's FLOP rate is measured on one
// forward shape (512 queries x 4096 keys, rates.cpp); a prefill CPU part is another shape (8192
// queries over a few pages), so its time counts kCpuPrefillMargin times the model's, and its share
// is rounded down: an optimistic CPU rate cannot set the step time (H200 host, 2026-12-02: one
// 256-token page of 8192 queries modelled 9.6 ms took ~33 ms, 2.3x the GPU's whole step). (FlexGen and FastDecode put attention next to the host KV; HeadInfer streams it; this
// splits one request's host pages between the two: docs/long-context.md.)
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "common/dtype.hpp"
#include "cooperative/cooperative_internal.hpp"

namespace fastattn {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kCpuPrefillMargin = 4.0;  // see the head comment

// printf into a std::string (the library has no fmt dependency).
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

double per_page(double amount, double rate) { return rate > 0 ? amount / rate : kInf; }

std::string rate_text(double bytes_per_s) {
  return bytes_per_s > 0 ? strf("%.1f GB/s", bytes_per_s / 1e9) : std::string("none");
}

std::string time_text(double s) {
  if (!std::isfinite(s)) return "inf";
  return s >= 1e-3 ? strf("%.2f ms", s * 1e3) : strf("%.1f us", s * 1e6);
}

}  // namespace

const char* to_string(PageTier tier) noexcept { return tier == PageTier::device ? "device" : "host"; }

const char* to_string(CooperativeKernel kernel) noexcept {
  return kernel == CooperativeKernel::forward ? "forward" : "kv_cache";
}

CooperativeKernel cooperative_gpu_kernel(std::int64_t seqlen_q) noexcept {
  return seqlen_q > kCooperativeDecodeMaxQueries ? CooperativeKernel::forward : CooperativeKernel::kv_cache;
}

CooperativeSplit choose_cooperative_split(std::int64_t device_pages, std::int64_t host_pages,
                                          std::int64_t page_size, std::int64_t num_kv_heads,
                                          std::int64_t head_dim, DType dtype, std::int64_t seqlen_q,
                                          std::int64_t num_heads, std::int64_t staging_pages,
                                          const CooperativeRates& rates,
                                          const CooperativeOptions& options) {
  CooperativeSplit split;
  split.device_pages = device_pages;
  split.chunk_pages = std::max<std::int64_t>(1, staging_pages);
  split.gpu_kernel = cooperative_gpu_kernel(seqlen_q);
  const bool prefill = split.gpu_kernel == CooperativeKernel::forward;
  const double page_bytes = 2.0 * static_cast<double>(page_size * num_kv_heads * head_dim) *
                            static_cast<double>(dtype_size(dtype));
  // QK^T and PV: 2 x 2 x rows x keys x head_dim per page.
  const double page_flops = 4.0 * static_cast<double>(page_size) * static_cast<double>(seqlen_q) *
                            static_cast<double>(num_heads) * static_cast<double>(head_dim);
  const double cpu_read = std::min(rates.cpu_attention, rates.host_read_during_dma);
  // Seconds per page of each part.
  // A FLOP rate of 0 means "not measured": no compute bound (a byte rate of 0: that path is absent).
  const double gpu_compute = rates.gpu_attention_flops > 0 ? page_flops / rates.gpu_attention_flops : 0.0;
  const double d = std::max(per_page(page_bytes, rates.gpu_hbm), gpu_compute);
  const double s = std::max(per_page(page_bytes, rates.pcie_h2d), gpu_compute);
  const double c = std::max(per_page(page_bytes, cpu_read),
                            rates.cpu_attention_flops > 0 ? page_flops / rates.cpu_attention_flops : 0.0);
  // The CPU's page time the split balances: prefill counts kCpuPrefillMargin times the model's.
  const double cm = prefill ? c * kCpuPrefillMargin : c;
  const std::int64_t H = host_pages;

  std::string why;
  std::int64_t x = 0;  // streamed pages
  switch (options.policy) {
    case SplitPolicy::stream_all:
      x = H;
      why = "forced: every host page streamed (SplitPolicy::stream_all)";
      break;
    case SplitPolicy::cpu_all:
      x = 0;
      why = "forced: every host page on the CPU (SplitPolicy::cpu_all)";
      break;
    case SplitPolicy::stream_fraction: {
      const double f = std::clamp(options.stream_fraction, 0.0, 1.0);
      x = std::clamp<std::int64_t>(std::llround(f * static_cast<double>(H)), 0, H);
      why = strf("forced: %.0f%% of the host pages streamed (SplitPolicy::stream_fraction)", f * 100);
      break;
    }
    case SplitPolicy::automatic:
      if (H == 0) {
        why = "every page is on the device";
      } else if (!std::isfinite(s) && !std::isfinite(c)) {
        x = 0;
        why = "no rate for streaming nor for the CPU: host pages on the CPU";
      } else if (!std::isfinite(s)) {
        x = 0;
        why = "no host-to-device copy rate (PCIe " + rate_text(rates.pcie_h2d) + "): host pages on the CPU";
      } else if (!std::isfinite(c)) {
        x = H;
        why = "no CPU attention rate: every host page streamed";
      } else {
        // Finish together. Decode: x s = (H - x) c. Prefill: D d + x s = (H - x) c m (one GPU for
        // the device and streamed parts; m = kCpuPrefillMargin), the CPU's share rounded down (x up).
        const double gpu_before = prefill ? static_cast<double>(device_pages) * d : 0.0;
        const double exact = (static_cast<double>(H) * cm - gpu_before) / (s + cm);
        x = std::clamp<std::int64_t>(prefill ? static_cast<std::int64_t>(std::ceil(exact)) : std::llround(exact), 0, H);
        const bool stream_copy_bound = per_page(page_bytes, rates.pcie_h2d) >= s;
        const bool cpu_read_bound = per_page(page_bytes, cpu_read) >= c;
        why = strf("a host page takes %s streamed (%s: PCIe %s, GPU %.0f TFLOP/s) and %s on the CPU (%s: read %s "
                   "= min(CPU attention %s, host read during DMA %s)), so %.0f%% of the host pages are streamed "
                   "and the rest attended by the CPU, to finish together%s",
                   time_text(s).c_str(), stream_copy_bound ? "copy-bound" : "compute-bound",
                   rate_text(rates.pcie_h2d).c_str(), rates.gpu_attention_flops / 1e12, time_text(c).c_str(),
                   cpu_read_bound ? "read-bound" : "compute-bound", rate_text(cpu_read).c_str(),
                   rate_text(rates.cpu_attention).c_str(), rate_text(rates.host_read_during_dma).c_str(),
                   100.0 * static_cast<double>(x) / static_cast<double>(H),
                   prefill ? " (prefill: the device and streamed parts one after the other on the GPU, the CPU's "
                             "page time counted 4x, its share rounded down)"
                           : "");
      }
      break;
  }
  split.streamed_pages = x;
  split.cpu_pages = H - x;
  split.device_s = device_pages > 0 ? static_cast<double>(device_pages) * d : 0.0;
  split.streamed_s = x > 0 ? static_cast<double>(x) * s : 0.0;
  split.cpu_s = split.cpu_pages > 0 ? static_cast<double>(split.cpu_pages) * cm : 0.0;  // prefill: with the margin
  // Prefill: the device and streamed parts queue on one GPU (compute-bound both).
  split.step_s = prefill ? std::max(split.device_s + split.streamed_s, split.cpu_s)
                         : std::max({split.device_s, split.streamed_s, split.cpu_s});
  const char* slowest = split.step_s == split.cpu_s && split.cpu_s > 0          ? "the CPU part"
                        : prefill                                                  ? "the GPU: device + streamed parts"
                        : split.step_s == split.streamed_s && split.streamed_s > 0 ? "the streamed part"
                                                                                   : "the device part";
  split.choice.backend = options.attention.backend;
  split.choice.kernel = "cooperative";
  split.choice.block_k = static_cast<int>(std::min<std::int64_t>(page_size, 1 << 30));
  split.choice.reason =
      strf("split %lld device / %lld streamed (chunks of %lld) / %lld CPU pages of %lld tokens: ",
           static_cast<long long>(device_pages), static_cast<long long>(x),
           static_cast<long long>(split.chunk_pages), static_cast<long long>(split.cpu_pages),
           static_cast<long long>(page_size)) +
      (prefill ? strf("prefill (seqlen_q %lld > %lld): the GPU parts run the forward kernel over each run of "
                      "consecutive device pages and each streamed chunk of up to %lld tokens, one f32 merge each; ",
                      static_cast<long long>(seqlen_q), static_cast<long long>(kCooperativeDecodeMaxQueries),
                      static_cast<long long>(split.chunk_pages * page_size))
               : std::string()) +
      why + "; model: device " + time_text(split.device_s) + ", streamed " + time_text(split.streamed_s) +
      ", CPU " + time_text(split.cpu_s) + ", step " + time_text(split.step_s) + " (" + slowest + "); rates " +
      (rates.source.empty() ? std::string("given") : rates.source);
  return split;
}

namespace coop {

bool refine_cooperative_rates(CooperativeRates& rates, const std::string& source, const CooperativeSplit& split,
                              double page_bytes, const CooperativeStep::Times& times, int run) {
  // Not from the first run: it pays one-off costs (the CPU part's thread team, first kernel
  // loads, scratch pages touched for the first time) that would read as a slow rate.
  if (split.gpu_kernel != CooperativeKernel::kv_cache || split.streamed_pages <= 0 || split.cpu_pages <= 0 ||
      run < 2) {
    return false;
  }
  // The GPU parts' time holds the device part too (on the same stream, under the first copies):
  // its model time, HBM-bound and tiny beside PCIe, is taken off.
  const double streamed_s = times.gpu_s - split.device_s;
  if (!(streamed_s > 0) || !(times.cpu_s > 0)) return false;
  const double streamed = static_cast<double>(split.streamed_pages) * page_bytes / streamed_s;
  const double cpu = static_cast<double>(split.cpu_pages) * page_bytes / times.cpu_s;
  // Only a rate off by more than kRefineFactor is replaced: a start measurement disturbed by
  // something else on the host (one process on the H200 host measured its CPU decode rate at
  // 8.4 GB/s where the others read 56-64 GB/s, and its steps ran 1.8x longer). Smaller
  // differences are the noise of a shared host from run to run, and following them did not pay:
  // the parts' contention changes with the split (more CPU pages slowed the copies by up to
  // 18%), and steps that chased their last runs were 36-42 ms where steps on the start rates
  // were 34-37 ms (decode1m, H200 host, 2026-12-02; docs/long-context.md).
  constexpr double kRefineFactor = 1.5;
  const double cpu_read = std::min(rates.cpu_attention, rates.host_read_during_dma);
  const auto off = [](double a, double b) { return b > 0 ? std::max(a / b, b / a) : kInf; };
  if (std::max(off(streamed, rates.pcie_h2d), off(cpu, cpu_read)) <= kRefineFactor) return false;
  rates.pcie_h2d = streamed;
  rates.cpu_attention = cpu;
  rates.host_read_during_dma = std::max(rates.host_read_during_dma, cpu);  // min() is the CPU's rate
  rates.source = (source.empty() ? std::string("given") : source) +
                 strf("; PCIe and CPU read replaced by run %d of this step (its parts timed as they ran together: "
                      "the start rates were more than %.1fx off)",
                      run, kRefineFactor);
  return true;
}

}  // namespace coop

CooperativeRates parse_cooperative_rates(const std::string& text) {
  CooperativeRates r;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const std::size_t eq = item.find('=');
    char* parsed_end = nullptr;
    const double value = eq == std::string::npos ? 0.0 : std::strtod(item.c_str() + eq + 1, &parsed_end);
    const std::string key = eq == std::string::npos ? item : item.substr(0, eq);
    if (eq == std::string::npos || parsed_end == item.c_str() + eq + 1 || *parsed_end != '\0' || value < 0) {
      throw Error(ErrorCode::invalid_argument,
                  "FASTATTN_COOP_RATES: expected key=value items (pcie, host, cpu, hbm, flops, cpuflops; "
                  "values >= 0) separated by commas, got '" + item + "'");
    }
    if (key == "pcie") r.pcie_h2d = value;
    else if (key == "host") r.host_read_during_dma = value;
    else if (key == "cpu") r.cpu_attention = value;
    else if (key == "hbm") r.gpu_hbm = value;
    else if (key == "flops") r.gpu_attention_flops = value;
    else if (key == "cpuflops") r.cpu_attention_flops = value;
    else throw Error(ErrorCode::invalid_argument,
                     "FASTATTN_COOP_RATES: expected a key among pcie, host, cpu, hbm, flops, cpuflops, got '" + key + "'");
    at = end + 1;
  }
  r.source = "FASTATTN_COOP_RATES=" + text;
  return r;
}

}  // namespace fastattn
