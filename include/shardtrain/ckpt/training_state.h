// The states a training run checkpoints, and the one place they are registered:
// the model's shards, the optimizer (AdamW's moments and step count), the train step, the data
// loader's position (with the schedule's reference batch and the data's identity), the run's
// configuration and an adapter run's settings and base. A new state is a Stateful registered
// in training_state(); the file format needs no change.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shardtrain/ckpt/state_registry.h"
#include "shardtrain/data/data_identity.h"
#include "shardtrain/data/loader.h"
#include "shardtrain/fsdp/engine.h"
#include "shardtrain/optim/optimizer.h"

namespace shardtrain::ckpt {

// The tensor groups of a training checkpoint, each holding one dataset per parameter: the fp32
// master weights, then AdamW's first and second moments.
inline constexpr const char* kTensorGroups[3] = {"model", "exp_avg", "exp_avg_sq"};

// The loop's side of a checkpoint: what a save records and a load restores besides the engine
// and the optimizer.
struct TrainState {
  int64_t step = 0;                // optimizer steps done
  data::LoaderState loader;        // the next step's epoch and rows consumed in it
  int64_t global_batch = 0;        // this run's; saved for information (positions are in rows)
  int64_t saved_global_batch = 0;  // a load: the saving run's
  // The schedule counts progress in steps of this global batch (the first run's; data/sampler.h),
  // and its total in those steps: a resume at another global batch keeps the learning rate.
  int64_t schedule_batch = 0, schedule_steps = 0;
  data::DataIdentity
      data;  // this run's seed and token file; a load refuses others (unless allowed)
  bool allow_data_change = false;  // --allow-data-change
  nlohmann::json run_config;       // saved only: a load leaves this run's own
};

// Collective over the shard group: the CRC-32 of every base parameter's fp32 bytes, in Hugging
// Face order, as the engine read them (the same at any world size, strategy and --param-dtype).
int64_t base_crc32(fsdp::FsdpEngine& engine, const comm::ParallelDims& dims);

// Collective over the world when it checksums a frozen base. The states hold references to engine,
// optimizer and state, which must outlive the registry. base_weights: an adapter run's --weights
// ("" for the seeded init), recorded beside its checksum. checksum_base: false for a registry
// that never saves or loads (a run without checkpoints), which skips reading the whole base.
StateRegistry training_state(fsdp::FsdpEngine& engine, const comm::ParallelDims& dims,
                             optim::Optimizer& optimizer, TrainState& state,
                             const std::string& base_weights = "", bool checksum_base = true);

}  // namespace shardtrain::ckpt
