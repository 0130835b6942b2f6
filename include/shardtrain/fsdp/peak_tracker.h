// Peak memory by phase, by step and over the run, from a source that reports the peak since its
// last read and starts a new one (the CUDA caching allocator's peak and reset, or the engine's own
// count on CPU). Reading a phase's peak resets the source, so a step's peak is the largest of its
// phases' and the run's the largest of its steps'; no reader sees a peak cut short by a reset.
#pragma once

#include <cstdint>
#include <functional>

namespace shardtrain::fsdp {

struct MemoryPeaks {
  int64_t allocated = 0;  // bytes in live tensors
  int64_t reserved = 0;   // bytes the allocator holds (on CPU: the same as allocated)
};

MemoryPeaks max_of(const MemoryPeaks& a, const MemoryPeaks& b);

class PeakTracker {
 public:
  using Source = std::function<MemoryPeaks()>;  // the peak since the previous call, which it resets
  explicit PeakTracker(Source take) : take_(std::move(take)) {}

  MemoryPeaks close_phase();  // the phase's peak, folded into the step's and the run's
  void discard();             // restarts the source without counting what it saw (between steps)
  MemoryPeaks end_step();     // the step's peak (its phases' largest); the next step starts at 0
  MemoryPeaks run() const { return run_; }  // the largest over every closed phase

 private:
  Source take_;
  MemoryPeaks step_, run_;
};

}  // namespace shardtrain::fsdp
