// progress.cpp — "label [#####     ] 3/8  item  0:12" redrawn in place with \r.
#include "progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace fastattn::perf {

ProgressBar::ProgressBar(int total, std::string label)
    : total_(total),
      label_(std::move(label)),
      enabled_(isatty(STDERR_FILENO) != 0 && total > 1),
      started_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (enabled_) std::fputs("\r\033[2K", stderr);
}

void ProgressBar::start(const std::string& item) {
  item_ = item;
  draw();
}

void ProgressBar::finish_item() {
  ++done_;
  draw();
}

void ProgressBar::draw() const {
  if (!enabled_) return;
  constexpr int kWidth = 24;
  const int filled = total_ > 0 ? kWidth * done_ / total_ : 0;
  const auto elapsed =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_)
          .count();
  const std::string line = fmt::format("{} [{}{}] {}/{}  {}  {}:{:02d}", label_,
                                       std::string(filled, '#'), std::string(kWidth - filled, ' '),
                                       done_, total_, item_, elapsed / 60, elapsed % 60);
  std::fprintf(stderr, "\r\033[2K%s", line.c_str());
  std::fflush(stderr);
}

}  // namespace fastattn::perf
