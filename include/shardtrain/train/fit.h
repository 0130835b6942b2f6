// The training loop, built from named components in the manner of torchtitan's train(): the
// engine (forward and backward, sharded gradients) and the objective it trains, the optimizer (clip
// + AdamW on the shards), the data loader, the validator, the checkpoint manager, the signal
// handler, the non-finite guard and the metrics publisher. Each has a small interface of its own;
// the loop only calls them in order.
//   a new objective:          an fsdp::Objective (train/sft_objective.h, train/dpo_objective.h)
//   a new optimizer:          optim/ (the Optimizer the engine's shards are handed to)
//   a new checkpoint trigger: ckpt::Manager::due(), or a new reason to pass `requested`
//   a new metric or sink:     MetricsPublisher::measure() / publish()
#pragma once
#include <cstdint>

#include "shardtrain/ckpt/manager.h"
#include "shardtrain/data/loader.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/train/config.h"
#include "shardtrain/train/faults.h"
#include "shardtrain/train/nonfinite.h"
#include "shardtrain/train/publisher.h"
#include "shardtrain/train/signal_handler.h"
#include "shardtrain/train/step_profiler.h"
#include "shardtrain/train/validator.h"

namespace shardtrain::train {

struct TrainComponents {
  fsdp::FsdpEngine& engine;
  comm::ParallelDims& dims;    // the mesh: the data rank, the world, the context group
  fsdp::Objective& objective;  // what the engine trains (train/sft_objective.h, dpo_objective.h)
  optim::Optimizer& optimizer;
  data::DataLoader& loader;
  Validator& validator;
  ckpt::Manager& checkpoints;
  SignalHandler& signals;
  MetricsPublisher& metrics;
  const FaultInjector& faults;
  NonfiniteGuard& nonfinite;
  StepProfiler& profiler;
};

// kStoppedBySignal: signals.last() says why and with which exit code; kStoppedNonFinite:
// nonfinite.last_message() names the step and rows.
enum class FitEnd { kCompleted, kStoppedBySignal, kStoppedNonFinite };

// Where training starts: a fresh run at step 0 with its own global batch as the schedule's
// reference; a resumed run at the checkpoint's step and reference (ckpt::TrainState).
struct RunStart {
  int64_t step = 0;
  int64_t schedule_batch =
      0;  // the global batch whose steps --steps, --warmup-steps and the schedule count
  int64_t schedule_steps =
      0;  // the checkpoint's schedule total in those steps (0: fresh or not recorded)
};

// Trains from start.step until the progress (data/sampler.h) reaches --steps or --epochs.
FitEnd fit(const TrainConfig& cfg, const optim::OptimizerConfig& optim, TrainComponents& c,
           const RunStart& start);

}  // namespace shardtrain::train
