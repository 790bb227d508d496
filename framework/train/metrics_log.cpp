#include "train/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/json.h"

namespace kiln::train {
namespace {

std::string csv_header(const std::vector<std::string>& columns) {
  std::string h;
  for (size_t i = 0; i < columns.size(); ++i) h += (i ? "," : "") + columns[i];
  return h;
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, std::vector<std::string> columns, bool append)
    : json_(path.ends_with(".jsonl") || path.ends_with(".json")), path_(path), columns_(std::move(columns)) {
  KILN_CHECK(!columns_.empty(), "MetricsLog", "'", path, "': a log needs at least one column");
  if (!json_) {
    for (const std::string& c : columns_)
      KILN_CHECK(c.find_first_of(",\"\r\n") == std::string::npos, "MetricsLog", "'", path,
                 "': a CSV column name cannot hold a comma, a quote or a line break, got '", c, "'");
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);  // an error for a file not there yet
  const bool had_content = append && !ec && size > 0;
  if (had_content && !json_) {
    // Appending rows under another header would make the file unreadable as a table.
    const std::string have = first_line(path), want = csv_header(columns_);
    KILN_CHECK(have == want, "MetricsLog", "cannot append to '", path, "': its header is '", have,
               "' but this log writes '", want, "'");
  }
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  KILN_CHECK(file_ != nullptr, "MetricsLog", "cannot open '", path, "' for writing: ", std::strerror(errno));
  if (!json_ && !had_content) {
    std::fprintf(file_, "%s\n", csv_header(columns_).c_str());
    std::fflush(file_);
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& o) noexcept
    : file_(o.file_), json_(o.json_), path_(std::move(o.path_)), columns_(std::move(o.columns_)) {
  o.file_ = nullptr;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    file_ = o.file_;
    json_ = o.json_;
    path_ = std::move(o.path_);
    columns_ = std::move(o.columns_);
    o.file_ = nullptr;
  }
  return *this;
}

void MetricsLog::write(const std::vector<double>& values) {
  if (!file_) return;
  KILN_CHECK(values.size() == columns_.size(), "MetricsLog", "'", path_, "': expected ", columns_.size(),
             " values, got ", values.size());
  std::string record = json_ ? "{" : "";
  char num[32];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) record += ',';
    if (json_) record += io::json_quote(columns_[i]) + ":";
    if (std::isfinite(values[i])) {
      std::snprintf(num, sizeof num, "%.9g", values[i]);
      record += num;
    } else if (json_) {
      record += "null";
    }
  }
  record += json_ ? "}\n" : "\n";
  const bool ok = std::fputs(record.c_str(), file_) >= 0 && std::fflush(file_) == 0;
  KILN_CHECK(ok, "MetricsLog", "writing to '", path_, "' failed: ", std::strerror(errno));
}

}  // namespace kiln::train
