// The signal-handler component: SIGUSR1 (Slurm's --signal=B:USR1@secs) asks for a checkpoint at
// the next step boundary, and with --on-signal exit for a stop after it. Any rank's signal
// counts for all: poll() agrees on it with one all-reduce, so every rank takes the same branch.
#pragma once
#include "shardtrain/comm/communicator.h"

namespace shardtrain {

class SignalHandler {
 public:
  struct Verdict {
    bool save = false;  // a checkpoint was asked for
    bool stop = false;  // and training ends after it (--on-signal exit)
  };
  // enabled: checkpoints are on (without them a signal has nothing to do and is not caught).
  SignalHandler(comm::Communicator& world, bool enabled, bool exit_on_signal);
  Verdict poll();  // collective when enabled; clears the request

 private:
  comm::Communicator& world_;
  bool enabled_, exit_on_signal_;
};

}  // namespace shardtrain
