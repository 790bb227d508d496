#pragma once
// Training metrics to a file, one record per call: CSV (a header line, then rows) or
// JSON lines when the path ends in .jsonl or .json. Values that are not known for a
// record (NaN) are written empty in CSV and null in JSON.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kiln::transformer {

class MetricsLog {
 public:
  MetricsLog() = default;
  // append: keep what the file has (a resumed run); a new CSV file gets the header.
  MetricsLog(const std::string& path, std::vector<std::string> columns, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& o) noexcept;
  MetricsLog& operator=(MetricsLog&& o) noexcept;

  bool is_open() const { return file_ != nullptr; }
  // One value per column, in order.
  void write(const std::vector<double>& values);

 private:
  std::FILE* file_ = nullptr;
  bool json_ = false;
  std::vector<std::string> columns_;
};

}  // namespace kiln::transformer
