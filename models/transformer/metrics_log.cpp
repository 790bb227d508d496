#include "transformer/metrics_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <kiln/kiln.h>

namespace kiln::transformer {

MetricsLog::MetricsLog(const std::string& path, std::vector<std::string> columns, bool append)
    : json_(path.ends_with(".jsonl") || path.ends_with(".json")), columns_(std::move(columns)) {
  bool had_content = append && std::filesystem::exists(path) && std::filesystem::file_size(path) > 0;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  KILN_CHECK(file_ != nullptr, "MetricsLog", "cannot open '", path, "' for writing: ", std::strerror(errno));
  if (!json_ && !had_content) {
    for (size_t i = 0; i < columns_.size(); ++i) std::fprintf(file_, "%s%s", i ? "," : "", columns_[i].c_str());
    std::fputc('\n', file_);
    std::fflush(file_);
  }
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& o) noexcept : file_(o.file_), json_(o.json_), columns_(std::move(o.columns_)) {
  o.file_ = nullptr;
}

MetricsLog& MetricsLog::operator=(MetricsLog&& o) noexcept {
  if (this != &o) {
    if (file_) std::fclose(file_);
    file_ = o.file_;
    json_ = o.json_;
    columns_ = std::move(o.columns_);
    o.file_ = nullptr;
  }
  return *this;
}

void MetricsLog::write(const std::vector<double>& values) {
  if (!file_) return;
  KILN_CHECK(values.size() == columns_.size(), "MetricsLog", "expected ", columns_.size(), " values, got ",
             values.size());
  if (json_) std::fputc('{', file_);
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) std::fputc(',', file_);
    if (json_) std::fprintf(file_, "\"%s\":", columns_[i].c_str());
    if (std::isfinite(values[i])) {
      std::fprintf(file_, "%.9g", values[i]);
    } else if (json_) {
      std::fputs("null", file_);
    }
  }
  std::fputs(json_ ? "}\n" : "\n", file_);
  std::fflush(file_);
}

}  // namespace kiln::transformer
