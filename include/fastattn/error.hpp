// fastattn/error.hpp — the one exception type the library throws.
#pragma once

#include <stdexcept>
#include <string>

namespace fastattn {

// What kind of failure an Error is. Bindings map invalid_argument and unsupported to
// ValueError-like exceptions and the rest to RuntimeError-like ones.
enum class ErrorCode {
  invalid_argument,  // a caller's value is wrong: shape, dtype, stride, pointer, option
  unsupported,       // the call is well formed but no kernel exists for it in this build
  device_error,      // a device runtime call failed
  out_of_memory,     // workspace or pool allocation failed
  internal,          // a bug in fastattn
};

const char* to_string(ErrorCode code) noexcept;

// Every message names the argument, the expected value and the actual value, e.g.
//   "k: expected shape[2] (num_kv_heads) to divide q.shape[2] = 8, got 3".
// On error no output tensor has been written.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace fastattn
