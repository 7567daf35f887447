// table.hpp — a small column-aligned table, rendered as plain text or as markdown.
#pragma once

#include <string>
#include <vector>

namespace fastattn::perf {

class Table {
 public:
  enum class Align { left, right };

  void add_column(std::string header, Align align = Align::left);
  void add_row(std::vector<std::string> cells);  // one cell per column
  bool empty() const { return rows_.empty(); }

  std::string text() const;      // space-padded, a rule under the header
  std::string markdown() const;  // GitHub table, right-aligned columns marked "--:"

 private:
  std::vector<std::size_t> widths() const;
  std::vector<std::string> headers_;
  std::vector<Align> aligns_;
  std::vector<std::vector<std::string>> rows_;
};

// Number formatting shared by every table: fixed decimals, "-" for a missing value.
std::string format_fixed(double value, int decimals);
std::string format_bytes(double bytes);  // "512 KiB", "3.2 GiB"
std::string format_seconds(double s);    // "812 us", "12.3 ms", "4.56 s"

}  // namespace fastattn::perf
