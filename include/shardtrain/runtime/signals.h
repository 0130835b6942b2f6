// SIGUSR1 asks for a checkpoint at the next step boundary (Slurm: #SBATCH --signal=B:USR1@secs);
// SIGTERM and SIGINT (scancel, a time limit, a preemption, Ctrl-C) ask for a stop there. The
// handlers only set bits; the training loop agrees on them across ranks with one all-reduce.
// The exit codes are the documented contract with the launchers (docs/reliability.md).
#pragma once

namespace shardtrain::runtime {

// A checkpoint was written and training stopped early (EX_TEMPFAIL: resume or requeue me).
constexpr int kExitCheckpointed = 75;
// The collective watchdog found a collective stuck past --collective-timeout (requeue-able).
constexpr int kExitCollectiveTimeout = 76;
// A non-finite loss or gradient norm stopped training (EX_DATAERR: a requeue would repeat it).
constexpr int kExitNonFinite = 65;
// Stopped by SIGTERM or SIGINT without a checkpoint: the shell's 128 + signal number.
constexpr int kExitTerminated = 143;
constexpr int kExitInterrupted = 130;

// Bits of pending_signals().
constexpr int kSignalCheckpoint = 1;  // SIGUSR1
constexpr int kSignalTerminate = 2;   // SIGTERM
constexpr int kSignalInterrupt = 4;   // SIGINT
constexpr int kSignalRelayedTerm =
    8;  // SIGUSR2: a SIGTERM relayed through mpirun (launch/mpirun.sh),
        // which forwards USR2 but SIGKILLs 1 s after forwarding a TERM

// SIGTERM, SIGINT and SIGUSR2 always; SIGUSR1 only when checkpoints are on (else it keeps its
// default).
void install_stop_signals(bool checkpoint_signal);
int take_pending_signals();  // the bits seen on this rank since the last take, cleared atomically

}  // namespace shardtrain::runtime
