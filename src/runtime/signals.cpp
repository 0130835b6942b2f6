#include "shardtrain/runtime/signals.h"

#include <csignal>

namespace shardtrain {
namespace {
volatile std::sig_atomic_t g_requested = 0;
extern "C" void on_usr1(int) { g_requested = 1; }
}  // namespace

void install_checkpoint_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking I/O and MPI calls resume instead of failing with EINTR
  sigaction(SIGUSR1, &sa, nullptr);
}

bool checkpoint_requested() { return g_requested != 0; }
void clear_checkpoint_request() { g_requested = 0; }

}  // namespace shardtrain
