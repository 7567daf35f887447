// cache.cpp — CooperativeKVCache (fastattn/cooperative.hpp): two page pools (device pages up to
// the budget, pinned host pages), per-sequence page tables, append across the boundary.
// Every mutating call checks everything first and throws before writing, so an Error leaves the
// bookkeeping and the pages as they were.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cooperative/cooperative_internal.hpp"

namespace fastattn {

using coop::allocate_device;
using coop::allocate_host;

namespace {

[[noreturn]] void fail(const std::string& name, const std::string& expected, const std::string& got,
                       ErrorCode code = ErrorCode::invalid_argument) {
  throw Error(code, name + ": expected " + expected + ", got " + got);
}

std::string str(std::int64_t v) { return std::to_string(v); }

constexpr std::size_t kDefaultStagingBytes = std::size_t{32} << 20;  // per buffer, K + V

}  // namespace

struct CooperativeKVCache::Impl {
  CooperativeCacheConfig config;
  std::size_t row_elems = 0;   // num_kv_heads * head_dim
  std::size_t esize = 0;
  std::size_t page_bytes = 0;  // K + V of one page
  std::int64_t device_pages = 0, host_pages = 0, staging_pages = 0;
  void* dev_k = nullptr;
  void* dev_v = nullptr;
  void* host_k = nullptr;
  void* host_v = nullptr;
  void* stage[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};  // [buffer][k or v]
  std::vector<int> refs;                       // per global page
  std::vector<std::int32_t> free_dev, free_host;  // stacks, lowest id on top
  std::vector<std::vector<std::int32_t>> pages;
  std::vector<std::int64_t> lengths;

  ~Impl() {
    const Device d = config.device;
    coop::free_device(d, dev_k);
    coop::free_device(d, dev_v);
    for (auto& b : stage) {
      coop::free_device(d, b[0]);
      coop::free_device(d, b[1]);
    }
    coop::free_host(d, host_k);
    coop::free_host(d, host_v);
  }
  std::size_t half_page() const { return page_bytes / 2; }
  std::size_t token_bytes() const { return row_elems * esize; }
  void* page_ptr(std::int32_t page, bool value) const {
    if (page < device_pages) {
      return static_cast<char*>(value ? dev_v : dev_k) + static_cast<std::size_t>(page) * half_page();
    }
    return static_cast<char*>(value ? host_v : host_k) + static_cast<std::size_t>(page - device_pages) * half_page();
  }
  void check_seq(std::int64_t seq) const {
    if (seq < 0 || seq >= config.max_sequences) {
      fail("seq", "a sequence id in [0, " + str(config.max_sequences) + ")", str(seq));
    }
  }
  void take(std::int32_t page) {
    if (refs[page]++ > 0) return;
    auto& stack = page < device_pages ? free_dev : free_host;
    if (stack.back() == page) {
      stack.pop_back();  // an append's allocation: the top of the stack
    } else {
      stack.erase(std::find(stack.begin(), stack.end(), page));
    }
  }
  void drop(std::int32_t page) {
    if (--refs[page] > 0) return;
    auto& stack = page < device_pages ? free_dev : free_host;
    // Keep the stack sorted high-to-low so the lowest free id is taken first.
    stack.insert(std::upper_bound(stack.begin(), stack.end(), page, std::greater<>()), page);
  }
};

CooperativeKVCache::CooperativeKVCache(const CooperativeCacheConfig& config) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const auto& c = config;
  if (c.dtype != DType::f32 && c.dtype != DType::f16 && c.dtype != DType::bf16) {
    fail("config.dtype", "f32, f16 or bf16", to_string(c.dtype));
  }
  if (c.num_kv_heads < 1) fail("config.num_kv_heads", ">= 1", str(c.num_kv_heads));
  if (c.head_dim < 1) fail("config.head_dim", ">= 1", str(c.head_dim));
  if (c.page_size < 1) fail("config.page_size", ">= 1", str(c.page_size));
  if (c.max_sequences < 1) fail("config.max_sequences", ">= 1", str(c.max_sequences));
  if (c.host_pages < 0) fail("config.host_pages", ">= 0", str(c.host_pages));
  if (c.staging_pages < 0) fail("config.staging_pages", ">= 0", str(c.staging_pages));
  m.config = c;
  m.row_elems = static_cast<std::size_t>(c.num_kv_heads * c.head_dim);
  m.esize = dtype_size(c.dtype);
  m.page_bytes = 2 * static_cast<std::size_t>(c.page_size) * m.row_elems * m.esize;
  m.staging_pages = c.staging_pages > 0
                        ? c.staging_pages
                        : std::max<std::int64_t>(1, static_cast<std::int64_t>(kDefaultStagingBytes / m.page_bytes));
  const std::size_t staging = c.host_pages > 0 ? 2 * static_cast<std::size_t>(m.staging_pages) * m.page_bytes : 0;
  if (c.device_budget_bytes < staging) {
    fail("config.device_budget_bytes",
         "at least the two staging buffers' " + std::to_string(staging) + " bytes (2 x " + str(m.staging_pages) +
             " pages of " + std::to_string(m.page_bytes) + " bytes; fewer config.staging_pages lowers it)",
         std::to_string(c.device_budget_bytes));
  }
  if (c.host_pages == 0) m.staging_pages = 0;
  m.device_pages = static_cast<std::int64_t>((c.device_budget_bytes - staging) / m.page_bytes);
  m.host_pages = c.host_pages;
  if (m.device_pages + m.host_pages > INT32_MAX) {
    fail("config", "at most 2^31 - 1 pages in all (int32 page ids)", str(m.device_pages + m.host_pages));
  }
  const std::size_t half = m.page_bytes / 2;
  m.dev_k = allocate_device(c.device, half * static_cast<std::size_t>(m.device_pages), "cooperative cache device pages (K)");
  m.dev_v = allocate_device(c.device, half * static_cast<std::size_t>(m.device_pages), "cooperative cache device pages (V)");
  for (auto& b : m.stage) {
    for (auto& p : b) p = allocate_device(c.device, half * static_cast<std::size_t>(m.staging_pages), "cooperative staging buffer");
  }
  m.host_k = allocate_host(c.device, half * static_cast<std::size_t>(m.host_pages), "cooperative cache host pages (K)");
  m.host_v = allocate_host(c.device, half * static_cast<std::size_t>(m.host_pages), "cooperative cache host pages (V)");
  const std::int64_t total = m.device_pages + m.host_pages;
  m.refs.assign(static_cast<std::size_t>(total), 0);
  for (std::int64_t p = m.device_pages - 1; p >= 0; --p) m.free_dev.push_back(static_cast<std::int32_t>(p));
  for (std::int64_t p = total - 1; p >= m.device_pages; --p) m.free_host.push_back(static_cast<std::int32_t>(p));
  m.pages.resize(static_cast<std::size_t>(c.max_sequences));
  m.lengths.assign(static_cast<std::size_t>(c.max_sequences), 0);
}

CooperativeKVCache::~CooperativeKVCache() = default;
CooperativeKVCache::CooperativeKVCache(CooperativeKVCache&&) noexcept = default;
CooperativeKVCache& CooperativeKVCache::operator=(CooperativeKVCache&&) noexcept = default;

void CooperativeKVCache::check_room(std::int64_t seq, std::int64_t tokens, const std::string& name) const {
  const Impl& m = *impl_;
  m.check_seq(seq);
  const std::int64_t held = static_cast<std::int64_t>(m.pages[static_cast<std::size_t>(seq)].size());
  const std::int64_t len = m.lengths[static_cast<std::size_t>(seq)];
  const std::int64_t ps = m.config.page_size;
  const std::int64_t need = (len + tokens + ps - 1) / ps - held;
  const std::int64_t available = static_cast<std::int64_t>(m.free_dev.size() + m.free_host.size());
  if (need > available) {
    fail(name, "at most " + str(available * ps + held * ps - len) + " new tokens (the cache is full: " + str(available) +
                   " free pages of " + str(ps) + " tokens)",
         str(tokens) + " tokens", ErrorCode::out_of_memory);
  }
}

void CooperativeKVCache::append(std::int64_t seq, const TensorView& k, const TensorView& v) {
  Impl& m = *impl_;
  m.check_seq(seq);
  const auto& c = m.config;
  std::int64_t n = 0;
  std::int64_t token_stride[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const TensorView& t = which == 0 ? k : v;
    const std::string name = which == 0 ? "k" : "v";
    const int base = t.rank == 4 ? 1 : 0;
    if (t.rank != 3 && !(t.rank == 4 && t.shape[0] == 1)) {
      fail(name, "shape [seqlen_new, num_kv_heads, head_dim] or [1, seqlen_new, num_kv_heads, head_dim]", t.shape_string());
    }
    if (t.dtype != c.dtype) fail(name, std::string("dtype ") + to_string(c.dtype) + " (the cache's)", std::string("dtype ") + to_string(t.dtype));
    if (t.shape[base + 1] != c.num_kv_heads || t.shape[base + 2] != c.head_dim) {
      fail(name, "[.., " + str(c.num_kv_heads) + ", " + str(c.head_dim) + "] (the cache's num_kv_heads, head_dim)", t.shape_string());
    }
    if (t.stride[base + 2] != 1 || t.stride[base + 1] != c.head_dim) {
      fail(name, "each token's [num_kv_heads, head_dim] contiguous (strides [.., " + str(c.head_dim) + ", 1])",
           "strides [" + str(t.stride[base + 1]) + ", " + str(t.stride[base + 2]) + "]");
    }
    if (t.device != Device::cpu() && t.device != c.device) {
      fail(name, "the CPU or the cache's device " + to_string(c.device), to_string(t.device));
    }
    if (t.data == nullptr && t.shape[base] > 0) fail(name, "a data pointer", "null");
    if (which == 0) n = t.shape[base];
    else if (t.shape[base] != n) fail("v", "seqlen_new = " + str(n) + " (as k)", str(t.shape[base]));
    token_stride[which] = t.stride[base];
  }
  check_room(seq, n, "k");
  auto& pages = m.pages[static_cast<std::size_t>(seq)];
  const std::int64_t len = m.lengths[static_cast<std::size_t>(seq)];
  const std::int64_t ps = c.page_size;
  const std::int64_t need = (len + n + ps - 1) / ps - static_cast<std::int64_t>(pages.size());
  if (len % ps != 0 && n > 0 && m.refs[static_cast<std::size_t>(pages.back())] > 1) {
    fail("seq", "a sequence whose last page no other sequence holds (an append would write into a shared page)",
         "page " + str(pages.back()) + " held by " + str(m.refs[static_cast<std::size_t>(pages.back())]) + " sequences");
  }
  // Checked: from here nothing throws but the device copies.
  for (std::int64_t i = 0; i < need; ++i) {
    auto& stack = !m.free_dev.empty() ? m.free_dev : m.free_host;
    const std::int32_t page = stack.back();
    m.take(page);
    pages.push_back(page);
  }
  const std::size_t tb = m.token_bytes();
  for (int which = 0; which < 2; ++which) {
    const TensorView& t = which == 0 ? k : v;
    const bool dense = token_stride[which] == static_cast<std::int64_t>(m.row_elems);
    std::int64_t t0 = 0;
    while (t0 < n) {
      const std::int64_t pos = len + t0;
      const std::int64_t in_page = pos % ps;
      const std::int64_t run = dense ? std::min(n - t0, ps - in_page) : 1;
      char* dst = static_cast<char*>(m.page_ptr(pages[static_cast<std::size_t>(pos / ps)], which == 1)) +
                  static_cast<std::size_t>(in_page) * tb;
      const char* src = static_cast<const char*>(t.data) + static_cast<std::size_t>(t0 * token_stride[which]) * m.esize;
      coop::copy_bytes(c.device, dst, src, static_cast<std::size_t>(run) * tb);
      t0 += run;
    }
  }
  m.lengths[static_cast<std::size_t>(seq)] = len + n;
}

void CooperativeKVCache::set_pages(std::int64_t seq, const std::vector<std::int32_t>& pages, std::int64_t length) {
  Impl& m = *impl_;
  m.check_seq(seq);
  const std::int64_t total = m.device_pages + m.host_pages;
  const std::int64_t ps = m.config.page_size;
  if (length < 0) fail("length", ">= 0", str(length));
  const std::int64_t want = (length + ps - 1) / ps;
  if (static_cast<std::int64_t>(pages.size()) != want) {
    fail("pages", str(want) + " page ids for " + str(length) + " tokens of " + str(ps) + " per page",
         str(static_cast<std::int64_t>(pages.size())) + " ids");
  }
  std::vector<std::int32_t> sorted(pages);
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (pages[i] < 0 || pages[i] >= total) {
      fail("pages[" + std::to_string(i) + "]", "a page id in [0, " + str(total) + ") (" + str(m.device_pages) +
                                                  " device pages, then " + str(m.host_pages) + " host pages)",
           str(pages[i]));
    }
  }
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) fail("pages", "distinct page ids", "page " + str(*dup) + " twice");
  auto& held = m.pages[static_cast<std::size_t>(seq)];
  for (const std::int32_t p : pages) m.take(p);  // first: a page kept in the new table stays held
  for (const std::int32_t p : held) m.drop(p);
  held = pages;
  m.lengths[static_cast<std::size_t>(seq)] = length;
}

void CooperativeKVCache::release(std::int64_t seq) {
  Impl& m = *impl_;
  m.check_seq(seq);
  for (const std::int32_t p : m.pages[static_cast<std::size_t>(seq)]) m.drop(p);
  m.pages[static_cast<std::size_t>(seq)].clear();
  m.lengths[static_cast<std::size_t>(seq)] = 0;
}

std::int64_t CooperativeKVCache::length(std::int64_t seq) const {
  impl_->check_seq(seq);
  return impl_->lengths[static_cast<std::size_t>(seq)];
}
const std::vector<std::int32_t>& CooperativeKVCache::pages(std::int64_t seq) const {
  impl_->check_seq(seq);
  return impl_->pages[static_cast<std::size_t>(seq)];
}
PageTier CooperativeKVCache::tier(std::int32_t page) const {
  const std::int64_t total = impl_->device_pages + impl_->host_pages;
  if (page < 0 || page >= total) fail("page", "a page id in [0, " + str(total) + ")", str(page));
  return page < impl_->device_pages ? PageTier::device : PageTier::host;
}
std::int64_t CooperativeKVCache::device_pages() const { return impl_->device_pages; }
std::int64_t CooperativeKVCache::host_pages() const { return impl_->host_pages; }
std::int64_t CooperativeKVCache::free_pages(PageTier t) const {
  return static_cast<std::int64_t>(t == PageTier::device ? impl_->free_dev.size() : impl_->free_host.size());
}
std::size_t CooperativeKVCache::page_bytes() const { return impl_->page_bytes; }
std::size_t CooperativeKVCache::staging_bytes() const {
  return 2 * static_cast<std::size_t>(impl_->staging_pages) * impl_->page_bytes;
}
std::size_t CooperativeKVCache::device_bytes() const {
  return static_cast<std::size_t>(impl_->device_pages) * impl_->page_bytes + staging_bytes();
}
const CooperativeCacheConfig& CooperativeKVCache::config() const { return impl_->config; }

TensorView CooperativeKVCache::pool_k(PageTier t) const {
  const Impl& m = *impl_;
  const bool dev = t == PageTier::device;
  return make_tensor(dev ? m.dev_k : m.host_k, m.config.dtype,
                     {dev ? m.device_pages : m.host_pages, m.config.page_size, m.config.num_kv_heads, m.config.head_dim},
                     dev ? m.config.device : Device::cpu());
}
TensorView CooperativeKVCache::pool_v(PageTier t) const {
  TensorView view = pool_k(t);
  view.data = t == PageTier::device ? impl_->dev_v : impl_->host_v;
  return view;
}
TensorView CooperativeKVCache::staging(int buffer, bool value) const {
  const Impl& m = *impl_;
  if (buffer < 0 || buffer > 1) fail("buffer", "0 or 1", std::to_string(buffer));
  return make_tensor(m.stage[buffer][value ? 1 : 0], m.config.dtype,
                     {m.staging_pages * m.config.page_size, m.config.num_kv_heads, m.config.head_dim}, m.config.device);
}

}  // namespace fastattn
