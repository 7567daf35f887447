// merge.hpp — fastattn._C.merge_states (fastattn/merge.hpp over Python arrays).
#pragma once

#include <nanobind/nanobind.h>

namespace fastattn::python {

// Adds merge_states to the extension module (called from module.cpp).
void register_merge(nanobind::module_& m);

}  // namespace fastattn::python
