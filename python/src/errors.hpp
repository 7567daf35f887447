// errors.hpp — fastattn::Error as Python exceptions.
#pragma once

#include <nanobind/nanobind.h>

namespace fastattn::python {

// Translates fastattn::Error into Python exceptions with the same message:
//   invalid_argument -> ValueError
//   unsupported      -> fastattn.UnsupportedError (a ValueError: well formed, no kernel for it)
//   device_error     -> RuntimeError
//   out_of_memory    -> MemoryError
//   internal         -> RuntimeError
// and adds UnsupportedError to module `m`.
void register_errors(nanobind::module_& m);

}  // namespace fastattn::python
