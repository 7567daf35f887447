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

}  // namespace fastattn::testing
