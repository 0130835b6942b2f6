#include "shardtrain/train/signal_handler.h"

#include <mpi.h>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/signals.h"

namespace shardtrain {

SignalVerdict signal_verdict(int bits, OnSignal policy, bool checkpoints) {
  SignalVerdict v;
  const bool term = bits & (kSignalTerminate | kSignalInterrupt | kSignalRelayedTerm);
  const bool usr1 = checkpoints && (bits & kSignalCheckpoint);
  if (!term && !usr1) return v;
  v.save = usr1 || (term && checkpoints && policy != OnSignal::kExitNoSave);
  v.stop = term || policy != OnSignal::kContinue;
  v.reason = bits & kSignalTerminate     ? "SIGTERM"
             : bits & kSignalRelayedTerm ? "SIGUSR2 (a relayed SIGTERM)"
             : bits & kSignalInterrupt   ? "SIGINT"
                                         : "SIGUSR1";
  const bool interrupt_only = !(bits & (kSignalTerminate | kSignalRelayedTerm));
  if (v.stop) v.exit_code = v.save ? kExitCheckpointed : interrupt_only ? kExitInterrupted : kExitTerminated;
  return v;
}

SignalHandler::SignalHandler(comm::Communicator& world, bool checkpoints, OnSignal policy)
    : world_(world), checkpoints_(checkpoints), policy_(policy) {
  install_stop_signals(checkpoints_);
}

SignalVerdict SignalHandler::poll() {
  int bits = take_pending_signals();
  world_.host_collective(comm::Op::kAllReduce, sizeof bits, [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bits, 1, MPI_INT, MPI_BOR, world_.mpi()));
  });
  return last_ = signal_verdict(bits, policy_, checkpoints_);
}

}  // namespace shardtrain
