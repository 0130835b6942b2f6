#include "shardtrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardtrain {

double LrSchedule::at(int64_t step, int64_t epoch) const {
  if (kind == "steplr") return base_lr * std::pow(gamma, static_cast<double>(epoch));
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return base_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  const double min_lr = base_lr * min_lr_ratio;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shardtrain
