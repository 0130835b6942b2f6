// Learning-rate schedules: linear warmup + cosine decay, and llama-recipes' per-epoch StepLR.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain::optim {

// The accepted schedule kinds, as --lr-schedule takes them.
inline constexpr const char* kLrScheduleKinds[] = {"cosine", "steplr", "constant"};

// Its defaults are train's option defaults (--help shows them; so does the README's table).
struct LrSchedule {
  std::string kind = "cosine";  // one of kLrScheduleKinds
  double base_lr = 1e-4;        // a fine-tuning rate for pretrained weights (llama-recipes')
  int64_t warmup_steps = 10;    // steps of the first run's global batch, as total_steps
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;  // cosine decays to base_lr * min_lr_ratio
  double gamma = 0.85;        // steplr: lr = base_lr * gamma^epoch

  // Throws UsageError naming the option (--lr-schedule, --warmup-steps, --gamma, --min-lr-ratio);
  // train's parser checks --lr > 0 once, with a message that suggests the default.
  void validate() const;
  // step: the progress before this optimizer step, in steps of the first run's global batch (an
  // integer at that batch; fractional after a resume at another); epoch: the 0-based epoch it is
  // in.
  double at(double step, int64_t epoch) const;
};

}  // namespace shardtrain::optim
