#include "shardtrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "shardtrain/runtime/error.h"

namespace shardtrain::optim {

namespace {
bool known_kind(const std::string& kind) {
  return std::find(std::begin(kLrScheduleKinds), std::end(kLrScheduleKinds), kind) !=
         std::end(kLrScheduleKinds);
}
}  // namespace

void LrSchedule::validate() const {
  if (!known_kind(kind)) {
    std::string accepted;
    for (const char* k : kLrScheduleKinds)
      accepted += (accepted.empty() ? "" : ", ") + std::string(k);
    throw runtime::UsageError("--lr-schedule must be one of " + accepted + ", got '" + kind + "'");
  }
  if (warmup_steps < 0) throw runtime::UsageError("--warmup-steps must be >= 0");
  if (gamma <= 0 || gamma > 1) throw runtime::UsageError("--gamma must be in (0, 1]");
  if (min_lr_ratio < 0 || min_lr_ratio > 1)
    throw runtime::UsageError("--min-lr-ratio must be in [0, 1]");
}

double LrSchedule::at(double step, int64_t epoch) const {
  if (!known_kind(kind)) validate();  // an unknown kind is an error, never a silent cosine
  if (kind == "steplr") return base_lr * std::pow(gamma, static_cast<double>(epoch));
  if (step < static_cast<double>(warmup_steps))
    return base_lr * (step + 1) / static_cast<double>(warmup_steps);
  if (kind == "constant") return base_lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, (step - static_cast<double>(warmup_steps)) / span);
  const double min_lr = base_lr * min_lr_ratio;
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace shardtrain::optim
