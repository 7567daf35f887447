// progress.hpp — a one-line progress bar on stderr for long sweeps.
#pragma once

#include <chrono>
#include <string>

namespace fastattn::perf {

// Drawn only when stderr is a terminal (never in logs or pipes). Safe to use either way.
class ProgressBar {
 public:
  ProgressBar(int total, std::string label);
  ~ProgressBar();  // clears the line
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void start(const std::string& item);  // about to run item `done() + 1`
  void finish_item();
  int done() const { return done_; }

 private:
  void draw() const;
  int total_;
  int done_ = 0;
  std::string label_;
  std::string item_;
  bool enabled_;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace fastattn::perf
