#include "shardtrain/optim/optimizer.h"

#include <cmath>
#include <utility>

#include "shardtrain/runtime/error.h"

namespace shardtrain::optim {

void OptimizerConfig::validate() const {
  adamw.validate();
  schedule.validate();
  if (grad_clip < 0) throw runtime::UsageError("--grad-clip must be >= 0 (0: off)");
}

Optimizer::Optimizer(const OptimizerConfig& cfg, std::function<void(at::Tensor&)> sum_across)
    : cfg_(cfg), sum_across_(std::move(sum_across)), adamw_(cfg.adamw) {}

at::Tensor Optimizer::grad_norm(const std::vector<at::Tensor>& grads) {
  const at::Device device =
      adamw_.slots().empty() ? at::Device(at::kCPU) : adamw_.slots().front().param.device();
  at::Tensor sq = grad_sq_norm(grads, device);
  if (sum_across_) sum_across_(sq);
  return sq.sqrt();
}

void Optimizer::apply(double lr, const std::vector<at::Tensor>& grads, const at::Tensor& norm,
                      const at::Tensor& skip) {
  const bool clip = cfg_.grad_clip > 0;
  const at::Device device =
      adamw_.slots().empty() ? at::Device(at::kCPU) : adamw_.slots().front().param.device();
  // On a GPU the clip rides in the AdamW kernel's read of each gradient: one pass over them less.
  // The CPU keeps clip_grad_norm_'s multiply, bit for bit torch's.
  if (clip && device.is_cuda()) {
    adamw_.step(lr, grads, skip, clip_divisor(norm, cfg_.grad_clip, device));
    return;
  }
  if (armed_) {  // every group was handed over by arm(): only the step's close is left
    armed_ = false;
    close_in_groups({});
    return;
  }
  if (runner_.run) {
    apply_in_groups(lr, grads, norm, skip);
    return;
  }
  if (clip) scale_grads(grads, norm, cfg_.grad_clip);
  adamw_.step(lr, grads, skip);
}

void Optimizer::apply_in_groups(double lr, const std::vector<at::Tensor>& grads,
                                const at::Tensor& norm, const at::Tensor& skip) {
  const at::Tensor found_inf = adamw_.begin_step(skip);
  const double clip = cfg_.grad_clip;
  size_t first = 0;
  for (size_t g = 0; g < runner_.group_ends.size(); ++g) {
    const size_t last = runner_.group_ends[g];
    // The group's own gradients, clipped by the global norm as clip_grad_norm_ does, then AdamW.
    std::vector<at::Tensor> mine(grads.begin() + first, grads.begin() + last);
    runner_.run(g, [this, lr, mine = std::move(mine), first, last, norm, found_inf, clip] {
      if (clip > 0) scale_grads(mine, norm, clip);
      adamw_.step_slots(lr, mine, first, last, found_inf);
    });
    first = last;
  }
  close_in_groups(found_inf);
}

void Optimizer::arm(double lr, const std::vector<at::Tensor>& grads) {
  if (!can_arm()) throw runtime::Error("optimizer: arm() needs a runner that arms and no clipping");
  adamw_.begin_step({});
  armed_ = true;
  size_t first = 0;
  for (size_t g = 0; g < runner_.group_ends.size(); ++g) {
    const size_t last = runner_.group_ends[g];
    std::vector<at::Tensor> mine(grads.begin() + first, grads.begin() + last);
    runner_.arm(g, [this, lr, mine = std::move(mine), first, last] {
      adamw_.step_slots(lr, mine, first, last, {});
    });
    first = last;
  }
}

void Optimizer::close_in_groups(const at::Tensor& found_inf) {
  // After the last group's step, on the runner's thread: the step count's uncount of a skip.
  const size_t last_group = runner_.group_ends.empty() ? 0 : runner_.group_ends.size() - 1;
  runner_.run(last_group, [this, found_inf] { adamw_.end_step(found_inf); });
}

Optimizer::~Optimizer() {
  try {
    settle();
  } catch (...) {  // a destructor does not throw; settle() reported it to whoever asked
  }
}

void Optimizer::settle() {
  if (runner_.wait) runner_.wait();
}

double Optimizer::step(double lr, const std::vector<at::Tensor>& grads) {
  const at::Tensor norm = grad_norm(grads);
  apply(lr, grads, norm);
  return norm.item<double>();
}

}  // namespace shardtrain::optim
