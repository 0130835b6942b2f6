// Learning-rate schedules: linear warmup + cosine decay, and llama-recipes' per-epoch StepLR.
#pragma once
#include <cstdint>
#include <string>

namespace shardtrain {

struct LrSchedule {
  std::string kind = "cosine";  // cosine | steplr | constant
  double base_lr = 1e-4;  // train's --lr default: a fine-tuning rate for pretrained weights (llama-recipes')
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;  // cosine decays to base_lr * min_lr_ratio
  double gamma = 0.85;        // steplr: lr = base_lr * gamma^epoch

  // step: 0-based optimizer step; epoch: 0-based epoch that step belongs to.
  double at(int64_t step, int64_t epoch) const;
};

}  // namespace shardtrain
