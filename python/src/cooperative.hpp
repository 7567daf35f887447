// cooperative.hpp — registers fastattn._C.CooperativeKVCache, CooperativeStep and
// cooperative_attention (cooperative.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace fastattn::python {

void register_cooperative(nanobind::module_& m);

}  // namespace fastattn::python
