// Fault injection for tests (--help-all shows its options): a rank that throws after setup, a
// rank that sleeps before a step, inside the data-wait window, like a slow input pipeline, and a
// rank whose gradient turns NaN or Inf after backward, as an overflow would make it.
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

namespace shardtrain::train {

struct FaultConfig {
  int fail_on_rank = -1;  // this rank throws after setup
  int sleep_rank = -1;    // this rank sleeps before step sleep_step (0: every step)
  int sleep_step = 0;
  double sleep_seconds = 0;
  int nan_rank = -1;        // this rank plants a non-finite gradient after backward at nan_step
  int nan_step = 0;         // 0: every step
  bool nan_is_inf = false;  // +Inf instead of NaN
};

class FaultInjector {
 public:
  FaultInjector(const FaultConfig& cfg, int rank) : cfg_(cfg), rank_(rank) {}
  void after_setup() const;           // throws on --fail-on-rank's rank
  void before_step(long step) const;  // sleeps on --debug-sleep's rank
  void after_backward(long step, const std::vector<at::Tensor>& grads) const;  // --debug-nan

 private:
  FaultConfig cfg_;
  int rank_;
};

}  // namespace shardtrain::train
