// The benches' clock: wall time, or this process's CPU time (all its threads) when
// bench_cpu_time is set (--cpu-time: steadier than wall time on a shared host).
#pragma once

#include <time.h>

#include <chrono>

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

}  // namespace rw::bench
