#include "shardtrain/optim/optimizer.h"

#include <cmath>
#include <utility>

namespace shardtrain {

Optimizer::Optimizer(const OptimizerConfig& cfg, std::function<double(double)> sum_across)
    : cfg_(cfg), sum_across_(std::move(sum_across)), adamw_(cfg.adamw) {}

double Optimizer::step(double lr, const std::vector<at::Tensor>& grads) {
  double sq = grad_sq_norm(grads);
  if (sum_across_) sq = sum_across_(sq);
  const double norm = std::sqrt(sq);
  scale_grads(grads, norm, cfg_.grad_clip);
  adamw_.step(lr, grads);
  return norm;
}

}  // namespace shardtrain
