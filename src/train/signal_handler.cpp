#include "shardtrain/train/signal_handler.h"

#include <mpi.h>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/signals.h"

namespace shardtrain::train {

SignalVerdict signal_verdict(int bits, OnSignal policy, bool checkpoints) {
  SignalVerdict v;
  const bool term =
      bits & (runtime::kSignalTerminate | runtime::kSignalInterrupt | runtime::kSignalRelayedTerm);
  const bool usr1 = checkpoints && (bits & runtime::kSignalCheckpoint);
  if (!term && !usr1) return v;
  v.save = usr1 || (term && checkpoints && policy != OnSignal::kExitNoSave);
  v.stop = term || policy != OnSignal::kContinue;
  v.reason = bits & runtime::kSignalTerminate     ? "SIGTERM"
             : bits & runtime::kSignalRelayedTerm ? "SIGUSR2 (a relayed SIGTERM)"
             : bits & runtime::kSignalInterrupt   ? "SIGINT"
                                                  : "SIGUSR1";
  const bool interrupt_only = !(bits & (runtime::kSignalTerminate | runtime::kSignalRelayedTerm));
  if (v.stop)
    v.exit_code = v.save           ? runtime::kExitCheckpointed
                  : interrupt_only ? runtime::kExitInterrupted
                                   : runtime::kExitTerminated;
  return v;
}

SignalHandler::SignalHandler(comm::Communicator& world, bool checkpoints, OnSignal policy)
    : world_(world), checkpoints_(checkpoints), policy_(policy) {
  runtime::install_stop_signals(checkpoints_);
}

SignalVerdict SignalHandler::poll() {
  int bits = runtime::take_pending_signals();
  world_.host_collective(comm::Op::kAllReduce, sizeof bits, [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bits, 1, MPI_INT, MPI_BOR, world_.mpi()));
  });
  return last_ = signal_verdict(bits, policy_, checkpoints_);
}

}  // namespace shardtrain::train
