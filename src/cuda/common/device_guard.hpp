// device_guard.hpp — makes a call's device current for a scope and gives the caller's back,
// also when the call throws. Host-only, no CUDA headers: `Api` supplies the three operations
// (cuda_device.hpp: the CUDA runtime's; the CPU unit tests: a fake), so the logic is tested on
// any machine.
//
//   Api::current()          the current device (may throw)
//   Api::make_current(int)  makes a device current (may throw)
//   Api::restore(int)       makes a device current again, noexcept (a destructor must not throw)
#pragma once

namespace fastattn::cuda {

template <class Api>
class BasicDeviceGuard {
 public:
  // Nothing to undo when `device` is already current, or when switching to it throws.
  explicit BasicDeviceGuard(int device) : previous_(Api::current()) {
    if (previous_ != device) {
      Api::make_current(device);
      switched_ = true;
    }
  }
  ~BasicDeviceGuard() {
    if (switched_) Api::restore(previous_);
  }
  BasicDeviceGuard(const BasicDeviceGuard&) = delete;
  BasicDeviceGuard& operator=(const BasicDeviceGuard&) = delete;

  int previous() const { return previous_; }
  bool switched() const { return switched_; }

 private:
  int previous_;
  bool switched_ = false;
};

}  // namespace fastattn::cuda
