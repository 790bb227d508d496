#include "transformer/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace kiln::transformer {

ProgressBar::ProgressBar(int64_t total, std::FILE* out, bool enabled)
    : total_(std::max<int64_t>(total, 1)),
      out_(out),
      enabled_(enabled && out != nullptr),
      tty_(out != nullptr && isatty(fileno(out))),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string ProgressBar::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(std::llround(s));
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(t / 3600),
                  static_cast<long long>(t / 60 % 60), static_cast<long long>(t % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(t / 60), static_cast<long long>(t % 60));
  }
  return buf;
}

void ProgressBar::update(int64_t done, const std::string& status) {
  if (!enabled_ || !tty_) return;  // non-terminals get the lines printed with println
  auto now = std::chrono::steady_clock::now();
  if (first_done_ < 0) first_done_ = done - 1;
  // At most ~20 redraws a second, but always the last one.
  if (done < total_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
  last_draw_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double rate = static_cast<double>(done - first_done_) / std::max(elapsed, 1e-9);
  double left = rate > 0 ? static_cast<double>(total_ - done) / rate : NAN;
  constexpr int kWidth = 24;
  int filled = static_cast<int>(kWidth * std::min<int64_t>(done, total_) / total_);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_, "\r\033[K[%s] %lld/%lld  %s  %s<%s", bar.c_str(), static_cast<long long>(done),
               static_cast<long long>(total_), status.c_str(), format_duration(elapsed).c_str(),
               format_duration(left).c_str());
  std::fflush(out_);
  line_open_ = true;
}

void ProgressBar::println(const std::string& line) {
  if (!enabled_) return;
  if (line_open_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  line_open_ = false;
}

}  // namespace kiln::transformer
