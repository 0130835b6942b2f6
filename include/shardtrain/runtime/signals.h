// SIGUSR1 asks for a checkpoint at the next step boundary (Slurm: #SBATCH --signal=B:USR1@secs).
// The handler only sets a flag; the training loop agrees on it across ranks with one all-reduce.
#pragma once

namespace shardtrain {

// Exit code after a signal-requested checkpoint with --on-signal exit (EX_TEMPFAIL: requeue me).
constexpr int kExitCheckpointed = 75;
// The collective watchdog found a collective stuck past --collective-timeout (requeue-able).
constexpr int kExitCollectiveTimeout = 76;

void install_checkpoint_signal();
bool checkpoint_requested();  // on this rank, since the last clear
void clear_checkpoint_request();

}  // namespace shardtrain
