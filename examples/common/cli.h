#pragma once
// A small command-line reader for the examples: `--name value` flags and `--name`
// switches, each validated and named in its error, and a main() wrapper that reports
// any exception as one line and exits 1. A bad flag is one line naming it and exit
// status 2 (--help prints the usage).
//
//   kiln_examples::Cli cli(argc, argv, "char_gpt [--steps N] [--seed S]");
//   int64_t steps = cli.integer("--steps", 100, 0, 1'000'000);
//   cli.finish();                      // unknown or repeated flags are errors
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <new>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <kiln/distributed/distributed.h>

namespace kiln_examples {

class Cli {
 public:
  Cli(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    program_ = usage_.substr(0, usage_.find(' '));
    for (int i = 1; i < argc; ++i) args_.emplace_back(argv[i]);
    if (!args_.empty() && (args_[0] == "--help" || args_[0] == "-h")) {
      std::printf("usage: %s\n", usage_.c_str());
      std::exit(0);
    }
  }

  // An integer flag in [lo, hi]; `def` when absent.
  int64_t integer(const std::string& flag, int64_t def, int64_t lo, int64_t hi) {
    const std::string* v = value(flag);
    if (!v) return def;
    size_t used = 0;
    long long x = 0;
    try {
      x = std::stoll(*v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v->size()) fail(flag + " expects an integer, got '" + *v + "'");
    if (x < lo || x > hi)
      fail(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + *v);
    return x;
  }

  // A real flag in [lo, hi]; `def` when absent. NaN and inf are refused.
  double real(const std::string& flag, double def, double lo, double hi) {
    const std::string* v = value(flag);
    if (!v) return def;
    size_t used = 0;
    double x = 0;
    try {
      x = std::stod(*v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v->size() || !std::isfinite(x)) fail(flag + " expects a number, got '" + *v + "'");
    if (x < lo || x > hi) fail(flag + " must be in [" + num(lo) + ", " + num(hi) + "], got " + *v);
    return x;
  }

  std::string text(const std::string& flag, const std::string& def) {
    const std::string* v = value(flag);
    return v ? *v : def;
  }

  // A text flag that must not be empty when given (a path, a name).
  std::string nonempty_text(const std::string& flag, const std::string& def) {
    const std::string* v = value(flag);
    if (v && v->empty()) fail(flag + " must not be empty");
    return v ? *v : def;
  }

  // A switch without a value: whether it was given.
  bool flag(const std::string& name) {
    known_.insert(name);
    for (const std::string& a : args_)
      if (a == name) return true;
    return false;
  }

  // Every argument must have been a known flag, each at most once.
  void finish() {
    std::set<std::string> seen;
    for (size_t i = 0; i < args_.size(); ++i) {
      const std::string& a = args_[i];
      if (!known_.count(a)) fail("unknown argument '" + a + "'");
      if (!seen.insert(a).second) fail(a + " given twice");
      if (takes_value_.count(a)) ++i;
    }
  }

  // The directory a flag names, created if needed and checked writable, before any
  // work: "--out a/file/x" (under a file) or "--out /proc/x" is a flag error then, not
  // a std::filesystem exception after training.
  std::string directory(const std::string& flag, const std::string& def) {
    const std::string dir = nonempty_text(flag, def);
    if (!dir.empty()) make_directory(flag, dir);
    return dir;
  }
  void make_directory(const std::string& flag, const std::string& dir) const {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail(flag + " '" + dir + "': cannot create the directory: " + ec.message());
    if (!std::filesystem::is_directory(dir, ec)) fail(flag + " '" + dir + "' is not a directory");
    if (::access(dir.c_str(), W_OK | X_OK) != 0) fail(flag + " '" + dir + "': the directory is not writable");
  }

  // One line naming the problem, exit status 2.
  [[noreturn]] void fail(const std::string& problem) const {
    std::fprintf(stderr, "%s: error: %s (--help for usage)\n", program_.c_str(), problem.c_str());
    std::exit(2);
  }

 private:
  const std::string* value(const std::string& flag) {
    known_.insert(flag);
    takes_value_.insert(flag);
    for (size_t i = 0; i < args_.size(); ++i) {
      if (args_[i] != flag) continue;
      if (i + 1 >= args_.size()) fail(flag + " needs a value");
      return &args_[i + 1];
    }
    return nullptr;
  }
  static std::string num(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }

  std::string usage_, program_;
  std::vector<std::string> args_;
  std::set<std::string> known_, takes_value_;
};

// A message as one line: line breaks become "; ".
inline std::string one_line(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  for (size_t at = s.find_first_of("\r\n"); at != std::string::npos; at = s.find_first_of("\r\n", at))
    s.replace(at, 1, "; ");
  return s;
}

// Runs body(); any exception (kiln::Error, a std:: one, anything else) is one line on
// stderr and exit status 1. The Cli's own errors exit 2 before getting here. Under
// mpirun (kiln::distributed initialised, more than one rank) the line names the rank and
// the whole job ends (MPI_Abort): the other ranks would otherwise wait for this one in
// their next collective.
inline int run_main(const char* program, const std::function<int()>& body) {
  std::string message;
  try {
    return body();
  } catch (const std::bad_alloc&) {
    message = "out of memory (std::bad_alloc): try smaller sizes";
  } catch (const std::exception& e) {
    message = one_line(e.what());
  } catch (...) {
    message = "unknown exception";
  }
  if (kiln::distributed::is_initialized() && kiln::distributed::world_size() > 1)
    kiln::distributed::abort(std::string(program) + ": error: " + message);
  std::fprintf(stderr, "%s: error: %s\n", program, message.c_str());
  return 1;
}

}  // namespace kiln_examples
