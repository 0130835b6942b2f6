#include "shardtrain/train/config.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::train {

void TrainConfig::validate() const {
  if (batch_size < 1)
    throw runtime::UsageError("--batch-size must be positive, got " + std::to_string(batch_size) +
                              "; use 1 or more");
  if (grad_accum < 1)
    throw runtime::UsageError("--grad-accum must be positive, got " + std::to_string(grad_accum) +
                              "; use 1 or more");
  if (steps < 0 || epochs < 1) throw runtime::UsageError("--steps must be >= 0 and --epochs >= 1");
  if (log_every < 1) throw runtime::UsageError("--log-every must be >= 1");
  if (breakdown_every < 0)
    throw runtime::UsageError("--breakdown-every must be >= 0 (0: only at the end of the run)");
  if (nonfinite.max_in_a_row < 1)
    throw runtime::UsageError("--max-nonfinite-steps must be >= 1, got " +
                              std::to_string(nonfinite.max_in_a_row));
  if (profile_step < 0 || (steps > 0 && profile_step > steps))
    throw runtime::UsageError("--profile-step must be between 1 and --steps (" +
                              std::to_string(steps) + "), or 0 for none; got " +
                              std::to_string(profile_step));
}

OnSignal parse_on_signal(const std::string& v) {
  if (v == "continue") return OnSignal::kContinue;
  if (v == "exit") return OnSignal::kExit;
  if (v == "exit-nosave") return OnSignal::kExitNoSave;
  throw runtime::UsageError("--on-signal must be continue, exit or exit-nosave, got '" + v + "'");
}

}  // namespace shardtrain::train
