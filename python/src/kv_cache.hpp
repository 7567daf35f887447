// kv_cache.hpp — fastattn._C.attention_with_kv_cache and fastattn._C.KVCachePlan
// (fastattn/kv_cache.hpp over Python arrays).
#pragma once

#include <nanobind/nanobind.h>

namespace fastattn::python {

// Adds attention_with_kv_cache and KVCachePlan to the extension module (called from module.cpp).
void register_kv_cache(nanobind::module_& m);

}  // namespace fastattn::python
