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
  if (clip) scale_grads(grads, norm, cfg_.grad_clip);
  adamw_.step(lr, grads, skip);
}

double Optimizer::step(double lr, const std::vector<at::Tensor>& grads) {
  const at::Tensor norm = grad_norm(grads);
  apply(lr, grads, norm);
  return norm.item<double>();
}

}  // namespace shardtrain::optim
