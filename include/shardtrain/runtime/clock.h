// Elapsed wall time, on the monotonic clock: the one helper for phases, saves, loads and ETAs.
#pragma once
#include <chrono>

namespace shardtrain::runtime {

// Seconds on the monotonic clock since an arbitrary origin (differences only).
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(monotonic_seconds()) {}
  double seconds() const {
    return monotonic_seconds() - start_;
  }  // since construction or restart()
  void restart() { start_ = monotonic_seconds(); }

 private:
  double start_;
};

}  // namespace shardtrain::runtime
