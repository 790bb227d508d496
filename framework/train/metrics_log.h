#pragma once
// Training metrics to a file, one record per write(): CSV (a header line, then rows) or
// JSON lines when the path ends in .jsonl or .json. A value that is not known for a
// record (NaN, or infinite) is written empty in CSV and null in JSON.
//
//   train::MetricsLog log("run/metrics.csv", {"step", "loss", "val_loss"}, /*append=*/resumed);
//   log.write({step, loss, NAN});
//
// append: a resumed run adds to what the file has; a CSV file that already has lines
// gets no second header (its header must be this log's columns). Each record is flushed
// as it is written, so the file is complete up to the last record after a crash.
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kiln::train {

class MetricsLog {
 public:
  MetricsLog() = default;  // closed: write() does nothing
  MetricsLog(const std::string& path, std::vector<std::string> columns, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& o) noexcept;
  MetricsLog& operator=(MetricsLog&& o) noexcept;

  bool is_open() const { return file_ != nullptr; }
  bool is_json() const { return json_; }
  const std::string& path() const { return path_; }
  const std::vector<std::string>& columns() const { return columns_; }
  // One value per column, in order.
  void write(const std::vector<double>& values);

 private:
  std::FILE* file_ = nullptr;
  bool json_ = false;
  std::string path_;
  std::vector<std::string> columns_;
};

}  // namespace kiln::train
