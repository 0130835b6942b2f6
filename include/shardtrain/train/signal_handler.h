// The signal-handler component. SIGUSR1 (Slurm's --signal=B:USR1@secs) asks for a checkpoint at
// the next step boundary; SIGTERM and SIGINT (scancel, a time limit, a preemption, Ctrl-C) ask
// for a stop there, with a checkpoint unless --on-signal exit-nosave. Any rank's signal counts
// for all: poll() agrees on it with one all-reduce, so every rank takes the same branch and no
// rank is left in a collective (the collective watchdog is not what ends the job).
#pragma once
#include <string>

#include "shardtrain/comm/communicator.h"
#include "shardtrain/train/config.h"

namespace shardtrain::train {

struct SignalVerdict {
  bool save = false;   // checkpoint at this step boundary
  bool stop = false;   // and training ends after it
  int exit_code = 0;   // when stop: kExitCheckpointed, kExitTerminated or kExitInterrupted
  std::string reason;  // "SIGTERM", "SIGINT" or "SIGUSR1"; empty: no signal
};

// Pure: the verdict for the signal bits seen on any rank (runtime/signals.h).
SignalVerdict signal_verdict(int bits, OnSignal policy, bool checkpoints);

class SignalHandler {
 public:
  // checkpoints: a --checkpoint-dir is set (without one SIGUSR1 keeps its default action).
  SignalHandler(comm::Communicator& world, bool checkpoints, OnSignal policy);
  SignalVerdict poll();                                // collective; takes the pending signals
  const SignalVerdict& last() const { return last_; }  // poll()'s latest answer

 private:
  comm::Communicator& world_;
  bool checkpoints_;
  OnSignal policy_;
  SignalVerdict last_;
};

}  // namespace shardtrain::train
