// The training loop, shared by the single-rank Trainer and the FSDP engine: steps, schedule,
// periodic validation, metrics lines and progress. The engine-specific parts come as hooks.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "shardtrain/data/loader.h"
#include "shardtrain/model/config.h"
#include "shardtrain/train/metrics.h"
#include "shardtrain/train/trainer.h"

namespace shardtrain {

struct FitHooks {
  std::function<StepResult(const std::vector<Batch>&, double lr)> step;
  std::function<void(int64_t step)> before_step;  // optional: runs in the step's data_wait phase
  std::function<double()> val_loss;          // optional
  std::function<double()> accuracy;          // optional exact match in [0, 1]
  std::function<void(StepMetrics&)> annotate;  // optional: extra figures for the metrics line
  // optional: checkpointing; returning false ends training after this step
  std::function<bool(int64_t step, bool last)> after_step;
  // optional, collective: on progress steps, summarizes every rank's phases into the metrics line
  // and returns a log line (empty on other ranks)
  std::function<std::string(StepMetrics&)> across_ranks;
  std::function<void(const StepMetrics&)> publish;  // optional: every step, every rank (Prometheus)
  int64_t start_step = 0;  // steps already done (resume)
  int64_t num_params = 0;
  int world_size = 1;
  bool writes_metrics = true;  // rank 0 only under MPI
};

void fit(const TrainConfig& cfg, const ModelConfig& model, DataLoader& loader, const FitHooks& hooks);

}  // namespace shardtrain
