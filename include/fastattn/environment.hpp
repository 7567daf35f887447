// fastattn/environment.hpp — the FASTATTN_* environment variables.
//
// fastattn reads its environment variables (README.md, "Environment variables") once per
// process, at the first call that needs one, and keeps that snapshot: later setenv / putenv /
// os.environ changes are not seen until reload_environment(). A value is checked by the call
// that uses it (an Error naming the variable), never at load or snapshot time.
#pragma once

namespace fastattn {

// Takes a new snapshot of the FASTATTN_* variables; calls that start afterwards use it (a call
// already running keeps the values it read). Does not check the values and does not throw.
// Thread-safe; do not call it while another thread changes the environment (POSIX setenv is
// not thread-safe).
void reload_environment();

}  // namespace fastattn
