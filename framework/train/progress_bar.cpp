#include "train/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

namespace kiln::train {
namespace {

constexpr int kBarWidth = 24;

}  // namespace

ProgressBar::ProgressBar(int64_t total, std::FILE* out, bool enabled)
    : total_(std::max<int64_t>(total, 1)),
      out_(out),
      enabled_(enabled && out != nullptr),
      tty_(out != nullptr && isatty(fileno(out))),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { close(); }

void ProgressBar::set_total(int64_t total_steps) { total_ = std::max<int64_t>(total_steps, 1); }

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

std::string ProgressBar::format_rate(double r, const std::string& unit) {
  char buf[64];
  if (!std::isfinite(r) || r < 0) {
    std::snprintf(buf, sizeof buf, "?");
  } else {
    // Whole units once the fraction no longer matters to a reader.
    std::snprintf(buf, sizeof buf, r >= 100 ? "%.0f" : r >= 10 ? "%.1f" : "%.2f", r);
  }
  return std::string(buf) + " " + unit + "/s";
}

std::string ProgressBar::format_line(int64_t done, int64_t total, const std::string& status, double elapsed,
                                     int64_t steps_this_run, double units, const std::string& unit) {
  total = std::max<int64_t>(total, 1);
  const double seconds = std::max(elapsed, 1e-9);
  const double steps_per_second = static_cast<double>(steps_this_run) / seconds;
  const double left =
      steps_per_second > 0 ? static_cast<double>(std::max<int64_t>(total - done, 0)) / steps_per_second : NAN;
  const int64_t filled = kBarWidth * std::clamp<int64_t>(done, 0, total) / total;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kBarWidth, '.');
  std::string line = "[" + bar + "] " + std::to_string(done) + "/" + std::to_string(total);
  if (!status.empty()) line += "  " + status;
  if (!unit.empty()) line += "  " + format_rate(units / seconds, unit);
  return line + "  " + format_duration(elapsed) + "<" + format_duration(left);
}

void ProgressBar::count(int64_t done, int64_t units) {
  if (first_done_ < 0) first_done_ = done - 1;  // the first step reported counts as made
  units_ += static_cast<double>(units);
}

std::string ProgressBar::line(int64_t done, const std::string& status) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return format_line(done, total_, status, elapsed, done - first_done_, units_, unit_);
}

void ProgressBar::update(int64_t done, const std::string& status, int64_t units) {
  if (!enabled_) return;
  const bool first = first_done_ < 0;
  count(done, units);
  if (!tty_) return;  // non-terminals get only the lines of report and println
  auto now = std::chrono::steady_clock::now();
  // At most ~20 redraws a second, but always the first and the last.
  if (!first && done < total_ && now - last_draw_ < std::chrono::milliseconds(50)) return;
  last_draw_ = now;
  std::fprintf(out_, "\r\033[K%s", line(done, status).c_str());
  std::fflush(out_);
  line_open_ = true;
}

void ProgressBar::report(int64_t done, const std::string& status, int64_t units) {
  if (!enabled_) return;
  count(done, units);
  println(line(done, status));
}

void ProgressBar::println(const std::string& line) {
  if (!enabled_) return;
  if (line_open_) std::fputs("\r\033[K", out_);
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
  line_open_ = false;
}

void ProgressBar::close() {
  if (!enabled_ || !line_open_) return;
  std::fputc('\n', out_);
  std::fflush(out_);
  line_open_ = false;
}

}  // namespace kiln::train
