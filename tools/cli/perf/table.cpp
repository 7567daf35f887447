// table.cpp — table rendering and number formatting.
#include "table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fastattn::perf {

void Table::add_column(std::string header, Align align) {
  headers_.push_back(std::move(header));
  aligns_.push_back(align);
}

void Table::add_row(std::vector<std::string> cells) {
  if (cells.size() != headers_.size())
    throw std::logic_error(
        fmt::format("Table::add_row: expected {} cells, got {}", headers_.size(), cells.size()));
  rows_.push_back(std::move(cells));
}

std::vector<std::size_t> Table::widths() const {
  std::vector<std::size_t> w;
  for (const auto& h : headers_) w.push_back(h.size());
  for (const auto& row : rows_)
    for (std::size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  return w;
}

std::string Table::text() const {
  const auto w = widths();
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c) s += "  ";
      s += aligns_[c] == Align::right ? fmt::format("{:>{}}", cells[c], w[c])
                                      : fmt::format("{:<{}}", cells[c], w[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(headers_);
  std::size_t total = 0;
  for (std::size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
  out += std::string(total, '-') + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string Table::markdown() const {
  auto line = [](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (const auto& cell : cells) s += " " + cell + " |";
    return s + "\n";
  };
  std::string out = line(headers_) + "|";
  for (const auto align : aligns_) out += align == Align::right ? "---:|" : "---|";
  out += "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string format_fixed(double value, int decimals) {
  if (!std::isfinite(value)) return "-";
  return fmt::format("{:.{}f}", value, decimals);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

std::string format_seconds(double s) {
  if (s < 1e-3) return fmt::format("{:.0f} us", s * 1e6);
  if (s < 1.0) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

}  // namespace fastattn::perf
