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

class Optimizer {
 public:
  // sum_across: adds a squared norm (a 0-d fp64 device tensor) over the ranks, in place, on the
  // device.
  explicit Optimizer(const OptimizerConfig& cfg, std::function<void(at::Tensor&)> sum_across = {});
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
  AdamW& adamw() { return adamw_; }
  const OptimizerConfig& config() const { return cfg_; }

 private:
  OptimizerConfig cfg_;
  std::function<void(at::Tensor&)> sum_across_;
  AdamW adamw_;
};

}  // namespace shardtrain::optim
