#include "shardtrain/runtime/signals.h"

#include <atomic>
#include <csignal>

namespace shardtrain::runtime {
namespace {
std::atomic<int> g_pending{0};  // lock-free, so safe in a handler
static_assert(std::atomic<int>::is_always_lock_free);
extern "C" void on_signal(int sig) {
  g_pending.fetch_or(sig == SIGUSR1   ? kSignalCheckpoint
                     : sig == SIGTERM ? kSignalTerminate
                     : sig == SIGUSR2 ? kSignalRelayedTerm
                                      : kSignalInterrupt);
}
void install(int sig) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking I/O and MPI calls resume instead of failing with EINTR
  sigaction(sig, &sa, nullptr);
}
}  // namespace

void install_stop_signals(bool checkpoint_signal) {
  install(SIGTERM);
  install(SIGINT);
  install(SIGUSR2);
  if (checkpoint_signal) install(SIGUSR1);
}

int take_pending_signals() { return g_pending.exchange(0); }

}  // namespace shardtrain::runtime
