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

Optimizer::Optimizer(const OptimizerConfig& cfg, std::function<double(double)> sum_across)
    : cfg_(cfg), sum_across_(std::move(sum_across)), adamw_(cfg.adamw) {}

double Optimizer::grad_norm(const std::vector<at::Tensor>& grads) const {
  double sq = grad_sq_norm(grads);
  if (sum_across_) sq = sum_across_(sq);
  return std::sqrt(sq);
}

void Optimizer::apply(double lr, const std::vector<at::Tensor>& grads, double norm) {
  scale_grads(grads, norm, cfg_.grad_clip);
  adamw_.step(lr, grads);
}

double Optimizer::step(double lr, const std::vector<at::Tensor>& grads) {
  const double norm = grad_norm(grads);
  apply(lr, grads, norm);
  return norm;
}

}  // namespace shardtrain::optim
