#include "shardtrain/train/faults.h"

#include <chrono>
#include <string>
#include <thread>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain {

void FaultInjector::after_setup() const {
  if (cfg_.fail_on_rank == rank_) throw Error("fault injected by --fail-on-rank " + std::to_string(rank_));
}

void FaultInjector::before_step(long step) const {
  if (cfg_.sleep_rank != rank_ || (cfg_.sleep_step != 0 && cfg_.sleep_step != step)) return;
  if (cfg_.sleep_step != 0)
    log::warn("--debug-sleep: sleeping " + std::to_string(cfg_.sleep_seconds) + " s before step " + std::to_string(step));
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.sleep_seconds));
}

}  // namespace shardtrain
