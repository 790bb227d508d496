#pragma once
// A live, one-line progress bar on a terminal ("\r" redraws), and plain lines when the
// output is not a terminal (a log file then gets one line per report, not thousands of
// carriage returns).
#include <chrono>
#include <cstdio>
#include <string>

namespace kiln::transformer {

class ProgressBar {
 public:
  // total: steps of the whole run (for the bar and the time left).
  ProgressBar(int64_t total_steps, std::FILE* out = stderr, bool enabled = true);
  // Redraws the bar after `done` of total steps, with a free-form status text
  // ("epoch 3/20  loss 1.234  5120 tok/s").
  void update(int64_t done, const std::string& status);
  // Ends the bar's line and prints `line` on its own.
  void println(const std::string& line);
  bool is_terminal() const { return tty_; }

  static std::string format_duration(double seconds);  // "1:05:03", "2:07", "0:09"

 private:
  int64_t total_;
  std::FILE* out_;
  bool enabled_, tty_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t first_done_ = -1;  // where this run started (a resumed run does not start at 0)
};

}  // namespace kiln::transformer
