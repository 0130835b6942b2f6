// Where a step's time goes, phase by phase. On CPU: wall time, less the host's time blocked in
// collectives, which is booked as exposed communication. On CUDA: events recorded on the
// compute stream at each boundary, so a phase gets the GPU time of the work it launched (the
// host returns from a launch long before the GPU is done: wall time would book forward's GPU
// time as backward and backward's as optimizer); exposed communication is then the compute
// stream's stalls at collectives' waits, timed by events too (Communicator::take_device_waits).
#pragma once
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "shardtrain/comm/parallel_dims.h"
#include "shardtrain/runtime/phases.h"

namespace shardtrain::fsdp {

class PhaseClock {
 public:
  // Starts now; exposed communication is the time blocked on the groups' collectives (CPU) or
  // the compute stream's stalls at their waits (on_cuda).
  PhaseClock(const comm::ParallelDims& groups, bool on_cuda);
  ~PhaseClock();
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  void close(runtime::Phase p);  // the time since the last boundary goes to p
  runtime::PhaseTimes finish();  // CUDA: waits for the last event; call once

 private:
  std::array<comm::Communicator*, 4> comms_;  // the groups' distinct communicators
  double wait_seconds() const;                // host time blocked on the groups' collectives so far
  runtime::PhaseTimes times_;
  double mark_, wait_mark_;
  struct Events;                    // CUDA only: one event per boundary, and the phase it closes
  std::unique_ptr<Events> events_;  // null on CPU
};

}  // namespace shardtrain::fsdp
