// Fault injection for tests (--help-all shows its options): a rank that throws after setup, and
// a rank that sleeps before a step, inside the data-wait window, like a slow input pipeline.
#pragma once

namespace shardtrain {

struct FaultConfig {
  int fail_on_rank = -1;  // this rank throws after setup
  int sleep_rank = -1;    // this rank sleeps before step sleep_step (0: every step)
  int sleep_step = 0;
  double sleep_seconds = 0;
};

class FaultInjector {
 public:
  FaultInjector(const FaultConfig& cfg, int rank) : cfg_(cfg), rank_(rank) {}
  void after_setup() const;             // throws on --fail-on-rank's rank
  void before_step(long step) const;    // sleeps on --debug-sleep's rank

 private:
  FaultConfig cfg_;
  int rank_;
};

}  // namespace shardtrain
