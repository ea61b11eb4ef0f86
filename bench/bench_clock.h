// The benches' clock: wall time, or this process's CPU time (all its threads) when
// bench_cpu_time is set (--cpu-time: steadier than wall time on a shared host).
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rw::bench {

inline bool bench_cpu_time = false;

inline double now_s() {
  if (bench_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The best ns per unit of `run(units)` (units fixed per call) over repeated calls: at least 5,
// and more until `seconds` have passed.
template <class Run>
double best_ns_per_unit(double seconds, long units, Run run) {
  double best = 1e30;
  const double start = now_s();
  for (int calls = 0; calls < 5 || now_s() - start < seconds; ++calls) {
    const double t0 = now_s();
    run(units);
    best = std::min(best, now_s() - t0);
  }
  return best / static_cast<double>(units) * 1e9;
}

// The only argument of the port probes: --seconds S (S > 0), default `seconds`. Sets `seconds`
// or prints why not and returns false.
inline bool parse_seconds_only(const char* name, int argc, char** argv, double& seconds) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
      if (!(seconds > 0.0)) {
        std::fprintf(stderr, "%s: --seconds must be a positive number\n", name);
        return false;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--seconds S]\n", name);
      return false;
    }
  }
  return true;
}

}  // namespace rw::bench
