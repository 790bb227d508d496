#pragma once
// What a benchmark's JSON line says about its process: the CPU's model name and the
// process's high-water resident memory.
#include <fstream>
#include <string>

#include <sys/resource.h>

namespace kiln_bench {

// /proc/cpuinfo's first "model name", or "unknown".
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

// The peak resident set so far, MB (mapped files' touched pages included).
inline double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

}  // namespace kiln_bench
