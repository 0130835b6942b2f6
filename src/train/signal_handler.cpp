#include "shardtrain/train/signal_handler.h"

#include <mpi.h>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/signals.h"

namespace shardtrain {

SignalHandler::SignalHandler(comm::Communicator& world, bool enabled, bool exit_on_signal)
    : world_(world), enabled_(enabled), exit_on_signal_(exit_on_signal) {
  if (enabled_) install_checkpoint_signal();
}

SignalHandler::Verdict SignalHandler::poll() {
  if (!enabled_) return {};
  int signal = checkpoint_requested() ? 1 : 0;
  world_.host_collective(comm::Op::kAllReduce, sizeof signal, [&] {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &signal, 1, MPI_INT, MPI_MAX, world_.mpi()));
  });
  clear_checkpoint_request();
  return {signal != 0, signal != 0 && exit_on_signal_};
}

}  // namespace shardtrain
