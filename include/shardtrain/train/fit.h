// The training loop, shared by the single-rank Trainer and the FSDP engine: steps, schedule,
// periodic validation, metrics lines and progress. The engine-specific parts come as hooks.
#pragma once
#include <functional>
#include <vector>

#include "shardtrain/data/loader.h"
#include "shardtrain/model/config.h"
#include "shardtrain/train/metrics.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain {

struct FitHooks {
  std::function<StepResult(const std::vector<Batch>&, double lr)> step;
  std::function<double()> val_loss;          // optional
  std::function<double()> accuracy;          // optional exact match in [0, 1]
  std::function<void(StepMetrics&)> annotate;  // optional: extra figures for the metrics line
  // optional: checkpointing; returning false ends training after this step
  std::function<bool(int64_t step, bool last)> after_step;
  int64_t start_step = 0;  // steps already done (resume)
  int64_t num_params = 0;
  int world_size = 1;
  bool writes_metrics = true;  // rank 0 only under MPI
};

void fit(const TrainConfig& cfg, const ModelConfig& model, DataLoader& loader, const FitHooks& hooks);

}  // namespace shardtrain
