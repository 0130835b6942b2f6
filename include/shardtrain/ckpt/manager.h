// The checkpoint manager: the training loop's one contact with checkpoints. It owns the save
// policy (every N steps, the last step, a signal's request), --resume auto|PATH, synchronous
// or background saves, and keeping the newest K. A new trigger is one more reason to pass
// `requested` to after_step; a new policy belongs in due().
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "shardtrain/ckpt/async_saver.h"
#include "shardtrain/ckpt/checkpoint.h"

namespace shardtrain::ckpt {

struct CheckpointConfig {
  std::string dir;                 // --checkpoint-dir; empty: no checkpoints
  std::string resume;              // "", "auto" (newest loadable in dir) or a checkpoint path
  int64_t save_every = 0;          // 0: only at the end (and on request)
  int keep = 0;                    // keep the newest K (0: all)
  StripeOptions stripe;            // Lustre striping hints for new files
  bool async = false;              // host copy at the step boundary, write on a background thread
  bool overwrite = false;          // a new run may replace the checkpoints another run left in dir
  bool allow_data_change = false;  // a resume may continue on another --seed or token file
  std::string base_weights;  // adapters: the frozen base's --weights, recorded in every checkpoint
  void validate() const;     // throws UsageError naming the option
  // Whether this run continues the checkpoints already in dir (--resume auto, or a file in dir).
  bool continues_dir() const;
};

class Manager {
 public:
  // Collective over the world. initial: this run's side (its global batch, data identity and
  // arguments, which go into every checkpoint); a resume fills in the saved position.
  Manager(CheckpointConfig cfg, fsdp::FsdpEngine& engine, const comm::ParallelDims& dims,
          optim::Optimizer& optimizer, TrainState initial);
  Manager(const Manager&) = delete;  // the registered states refer to state_
  Manager& operator=(const Manager&) = delete;
  bool enabled() const { return !cfg_.dir.empty(); }
  // Collective: loads the checkpoint --resume names (auto: the newest that loads, skipping bad
  // ones with a warning). Empty when there is nothing to resume from.
  std::optional<TrainState> resume();
  // Collective, at a step boundary: saves when the policy or `requested_by` (a signal's name,
  // empty when none) asks. `final`: the
  // loop ends after this step, so a background save is waited for. Returns the seconds the
  // loop was blocked (0: no save).
  double after_step(int64_t step, const std::string& requested_by, bool final,
                    const data::LoaderState& loader);
  void finish();  // waits for a background save; rethrows its failure
  // What the saves record of the schedule: its reference global batch and total in those steps.
  void set_schedule(int64_t schedule_batch, int64_t schedule_steps);
  bool due(int64_t step, bool requested, bool final) const;  // after_step would save now

 private:
  CheckpointConfig cfg_;
  TrainState state_;        // the loop's side: set before each save, filled by a resume
  StateRegistry registry_;  // everything a checkpoint holds (training_state.h)
  std::unique_ptr<AsyncSaver> saver_;
};

}  // namespace shardtrain::ckpt
