#include "shardtrain/train/faults.h"

#include <ATen/ATen.h>

#include <chrono>
#include <limits>
#include <string>
#include <thread>

#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/logging.h"

namespace shardtrain::train {

void FaultInjector::after_setup() const {
  if (cfg_.fail_on_rank == rank_)
    throw runtime::Error("fault injected by --fail-on-rank " + std::to_string(rank_));
}

void FaultInjector::before_step(long step) const {
  if (cfg_.sleep_rank != rank_ || (cfg_.sleep_step != 0 && cfg_.sleep_step != step)) return;
  if (cfg_.sleep_step != 0)
    runtime::log::warn("--debug-sleep: sleeping " + std::to_string(cfg_.sleep_seconds) +
                       " s before step " + std::to_string(step));
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg_.sleep_seconds));
}

void FaultInjector::after_backward(long step, const std::vector<at::Tensor>& grads) const {
  if (cfg_.nan_rank != rank_ || (cfg_.nan_step != 0 && cfg_.nan_step != step)) return;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) {  // one element of this rank's first gradient shard
      g.view(-1).narrow(0, 0, 1).fill_(cfg_.nan_is_inf ? std::numeric_limits<double>::infinity()
                                                       : std::numeric_limits<double>::quiet_NaN());
      runtime::log::warn("--debug-nan: planted " + std::string(cfg_.nan_is_inf ? "Inf" : "NaN") +
                         " in a gradient at step " + std::to_string(step));
      return;
    }
}

}  // namespace shardtrain::train
