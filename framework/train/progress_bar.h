#pragma once
// A live, one-line progress bar for a training loop:
//
//   [##########..............] 420/1000  loss 0.4321  830 samples/s  0:12<0:17
//
// steps done of the total, a free-form status text, a rate of the units the caller
// reports (tokens, samples: set_unit), the time elapsed and the time left. On a terminal
// the line is redrawn in place ("\r"); when the stream is not a terminal (a log file, a
// pipe) update() writes nothing and only println() and report() write, one plain line
// each, so a log never fills with thousands of carriage returns.
//
//   train::ProgressBar bar(epochs * batches);
//   bar.set_unit("samples");
//   for (...) { ...; bar.update(step, "loss " + std::to_string(loss), batch_size); }
//   bar.report(step, "epoch 3 done");  // a line that stays (and the only output in a log)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace kiln::train {

class ProgressBar {
 public:
  // total_steps: steps of the whole run (for the bar and the time left); out: where it
  // draws (a terminal or not is found out here); enabled false: it writes nothing.
  explicit ProgressBar(int64_t total_steps, std::FILE* out = stderr, bool enabled = true);
  ~ProgressBar();  // ends a bar line left open
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // The name of the units update() and report() count ("tok", "samples"): the line then
  // shows their rate, "5120 tok/s". Without one it shows no rate.
  void set_unit(std::string unit) { unit_ = std::move(unit); }

  // After `done` of the total steps: redraws the bar on a terminal (at most ~20 times a
  // second, and always at the last step) with `status` ("epoch 3/20  loss 1.234");
  // writes nothing elsewhere. units: how many units the steps since the previous call
  // processed (the batch's tokens or samples), for the rate.
  void update(int64_t done, const std::string& status, int64_t units = 0);
  // The same as update, but the line stays: on a terminal it replaces the live bar and
  // the bar resumes below it; elsewhere it is one plain line. Call update or report for
  // a step, not both (both would count its units twice).
  void report(int64_t done, const std::string& status, int64_t units = 0);
  // Ends the bar's line and prints `line` on its own.
  void println(const std::string& line);
  // Ends a bar line left open (a newline after it); the destructor does it too.
  void close();

  // A new total, for a run whose length is known only as it goes (a time budget: the
  // steps it will make at the pace so far).
  void set_total(int64_t total_steps);

  bool is_terminal() const { return tty_; }
  int64_t total() const { return total_; }

  // "1:05:03", "2:07", "0:09"; "?" for a negative or non-finite time.
  static std::string format_duration(double seconds);
  // "5120 tok/s", "830 samples/s", "12.5 samples/s", "0.25 tok/s"; "? tok/s" for a
  // rate not known (negative or non-finite).
  static std::string format_rate(double units_per_second, const std::string& unit);
  // One line of the bar, without terminal control codes:
  // "[####....] done/total  status  rate  elapsed<left". steps_this_run: steps made since
  // the bar started (a resumed run does not start at 0), the basis of the time left;
  // units: processed since the start (the rate is shown when unit is not empty).
  static std::string format_line(int64_t done, int64_t total, const std::string& status, double elapsed_seconds,
                                 int64_t steps_this_run, double units, const std::string& unit);

 private:
  void count(int64_t done, int64_t units);
  // The bar's line as of now.
  std::string line(int64_t done, const std::string& status) const;

  int64_t total_;
  std::FILE* out_;
  bool enabled_, tty_;
  bool line_open_ = false;
  std::string unit_;
  double units_ = 0;
  std::chrono::steady_clock::time_point start_, last_draw_;
  int64_t first_done_ = -1;  // where this run started (a resumed run does not start at 0)
};

}  // namespace kiln::train
