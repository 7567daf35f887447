// errors.cpp — the exception translator for fastattn::Error.
#include "errors.hpp"

#include <exception>

#include "fastattn/error.hpp"

namespace fastattn::python {
namespace {

namespace nb = nanobind;

PyObject* python_type_of(ErrorCode code, PyObject* unsupported_error) {
  switch (code) {
    case ErrorCode::invalid_argument: return PyExc_ValueError;
    case ErrorCode::unsupported: return unsupported_error;
    case ErrorCode::out_of_memory: return PyExc_MemoryError;
    case ErrorCode::device_error:
    case ErrorCode::internal: return PyExc_RuntimeError;
  }
  return PyExc_RuntimeError;
}

}  // namespace

void register_errors(nb::module_& m) {
  // Created once per interpreter; the module attribute holds the reference the translator uses.
  PyObject* unsupported = PyErr_NewExceptionWithDoc(
      "fastattn.UnsupportedError",
      "The call is well formed but this build of fastattn has no kernel for it (for example a "
      "CUDA tensor in a build without CUDA). A subclass of ValueError.",
      PyExc_ValueError, nullptr);
  if (!unsupported) throw nb::python_error();
  m.attr("UnsupportedError") = nb::steal(unsupported);

  nb::register_exception_translator(
      [](const std::exception_ptr& p, void* payload) {
        try {
          std::rethrow_exception(p);
        } catch (const Error& e) {
          PyErr_SetString(python_type_of(e.code(), static_cast<PyObject*>(payload)), e.what());
        }
        // Any other exception leaves this translator and reaches nanobind's defaults
        // (std::bad_alloc -> MemoryError, std::exception -> RuntimeError).
      },
      unsupported);
}

}  // namespace fastattn::python
