// The engine's memory: the persistent bytes it reports (fixed at construction) and the peaks by
// phase, step and run. On a GPU the peaks are the caching allocator's (every tensor); on CPU,
// the bytes the engine itself holds: its persistent state plus what comes and goes within a
// step (gathered units, gradient shards, reductions in flight; activations are not counted).
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>

#include "shardtrain/fsdp/memory_model.h"
#include "shardtrain/fsdp/peak_tracker.h"

namespace shardtrain::fsdp {

class EngineMemory {
 public:
  // transient: the bytes held now beyond the persistent ones (UnitSchedule::transient_bytes).
  EngineMemory(MemoryReport report, at::Device device, std::function<int64_t()> transient);
  EngineMemory(const EngineMemory&) = delete;  // the peak tracker reads through `this`
  EngineMemory& operator=(const EngineMemory&) = delete;

  const MemoryReport& report() const { return report_; }
  void note();                // CPU: the phase's peak follows what is held now
  int64_t take_phase_peak();  // the most held since the last call; a new phase starts
  void start_step() {
    peaks_.discard();
  }  // phases start from what is held now (not validation's or a save's)
  MemoryPeaks end_step_peaks() {
    return peaks_.end_step();
  }                                                       // the step's: the largest of its phases'
  MemoryPeaks run_peaks() const { return peaks_.run(); }  // the run's: the largest of its steps'
  bool counts_device() const {
    return device_.is_cuda();
  }  // the allocator's peaks, not the engine's count
  int64_t held_bytes() const { return report_.persistent() + transient_(); }

 private:
  MemoryPeaks
  read_and_reset_peak();  // the allocator's (GPU) or the engine's (CPU) peak since the last read

  MemoryReport report_;
  at::Device device_;
  std::function<int64_t()> transient_;
  int64_t phase_peak_ = 0;  // CPU: the most held_bytes() since the last read
  PeakTracker peaks_;       // phases, steps and the run, from read_and_reset_peak()
};

}  // namespace shardtrain::fsdp
