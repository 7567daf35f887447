// cooperative_support.hpp — helpers shared by the cooperative cache tests (fastattn/cooperative.hpp):
// cooperative_cost_model_test.cpp, cooperative_step_test.cpp and cooperative_kv_cache_call_test.cpp.
#pragma once

#include "fastattn/fastattn.hpp"

namespace fastattn::testing {

// Given rates (source "given"), as the cost model and the split policies read them.
inline CooperativeRates rates(double pcie, double host, double cpu, double hbm = 4e12, double flops = 4e14,
                              double cpuflops = 1e12) {
  CooperativeRates r;
  r.pcie_h2d = pcie;
  r.host_read_during_dma = host;
  r.cpu_attention = cpu;
  r.gpu_hbm = hbm;
  r.gpu_attention_flops = flops;
  r.cpu_attention_flops = cpuflops;
  r.source = "given";
  return r;
}

// A cache config with room for `device_pages` device pages beside its two staging buffers of
// `staging_pages` pages each (the budget counts 2-byte elements), and `host_pages` host pages.
inline CooperativeCacheConfig cache_config(DType dtype, std::int64_t kv_heads, std::int64_t head_dim,
                                           std::int64_t page_size, std::int64_t device_pages,
                                           std::int64_t staging_pages, std::int64_t host_pages) {
  CooperativeCacheConfig c;
  c.dtype = dtype;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.page_size = page_size;
  c.staging_pages = staging_pages;
  c.host_pages = host_pages;
  c.device_budget_bytes =
      static_cast<std::size_t>((device_pages + 2 * staging_pages) * 2 * page_size * kv_heads * head_dim * 2);
  return c;
}

}  // namespace fastattn::testing
