// The optimizer component: global-norm clipping and AdamW over whatever tensors it is given,
// whole parameters on one rank or this rank's shards under FSDP. It knows nothing of sharding:
// `sum_across` totals a squared norm over the ranks whose gradients tile the model.
#pragma once
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "shardtrain/optim/adamw.h"
#include "shardtrain/optim/lr_schedule.h"

namespace shardtrain::optim {

// Everything the user sets about optimization (parsed once, validated once).
struct OptimizerConfig {
  AdamWConfig adamw;
  double grad_clip = 1.0;  // global-norm clip; 0 disables clipping
  LrSchedule schedule;     // total_steps is filled in by the training loop
  void validate()
      const;  // every field, whichever front end filled it: UsageError naming the option
};

// Where apply() steps AdamW when it is not all at once on the caller's thread: the slots fall into
// groups (slot ranges ending at group_ends, in order), and run(g, job) runs group g's job, possibly
// on another thread, in the order given; wait() returns when every job given has run. CPU offload
// steps one FSDP unit per group on the host while the device computes (fsdp/host_offload.h).
struct GroupRunner {
  std::vector<size_t> group_ends;
  std::function<void(size_t group, std::function<void()> job)> run;
  std::function<void()> wait;
  // Optional: runs group g's job as soon as that group's gradients are final (during the backward
  // pass), for updates that need no global norm (arm()).
  std::function<void(size_t group, std::function<void()> job)> arm;
};

class Optimizer {
 public:
  // sum_across: adds a squared norm (a 0-d fp64 device tensor) over the ranks, in place, on the
  // device.
  explicit Optimizer(const OptimizerConfig& cfg, std::function<void(at::Tensor&)> sum_across = {});
  // Moved only before any step is handed to the runner (make_optimizer's return): a step in
  // flight refers to this object.
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(Optimizer&&) = delete;
  // The steps handed to the runner refer to this optimizer: they finish before it goes (an
  // error of theirs was the caller's to read from settle()).
  ~Optimizer();
  // params[i] is stepped with the i-th gradient given to step(); decay: false for norm weights.
  void add(const at::Tensor& param, bool decay) { adamw_.add(param, decay); }
  // Clips grads by the global norm, then takes an AdamW step. Returns the norm before clipping.
  double step(double lr, const std::vector<at::Tensor>& grads);
  // step() in two halves, on the device (no host read), so a caller can decide from the norm:
  at::Tensor grad_norm(
      const std::vector<at::Tensor>& grads);  // 0-d fp64; collective over sum_across's ranks
  // Clip by norm, then AdamW; skip (a device scalar, 1 = skip) leaves parameters, moments and step
  // count alone.
  void apply(double lr, const std::vector<at::Tensor>& grads, const at::Tensor& norm,
             const at::Tensor& skip = {});
  // Later apply()s hand each group's clip and AdamW to the runner; settle() before reading the
  // parameters, moments or step count.
  void set_runner(GroupRunner runner) { runner_ = std::move(runner); }
  void settle();  // every step handed to the runner has run (a no-op without one)
  // Without clipping, a group's AdamW update needs only its own gradients: arm() hands the step's
  // groups to the runner before the backward pass, so each steps as soon as its gradients are in,
  // and the next apply() only closes the step (its norm and skip are not used: the caller arms
  // only where no step is ever skipped). grads: the gradients apply() will be given.
  bool can_arm() const { return static_cast<bool>(runner_.arm) && cfg_.grad_clip == 0; }
  void arm(double lr, const std::vector<at::Tensor>& grads);
  AdamW& adamw() { return adamw_; }
  const OptimizerConfig& config() const { return cfg_; }

 private:
  OptimizerConfig cfg_;
  std::function<void(at::Tensor&)> sum_across_;
  void apply_in_groups(double lr, const std::vector<at::Tensor>& grads, const at::Tensor& norm,
                       const at::Tensor& skip);
  void close_in_groups(const at::Tensor& found_inf);
  AdamW adamw_;
  GroupRunner runner_;  // no run: apply() steps every slot at once
  bool armed_ = false;  // arm()ed: the groups step as their gradients come
};

}  // namespace shardtrain::optim
