#include "shardtrain/optim/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace shardtrain {

void AdamW::add(const at::Tensor& param, bool decay) {
  slots_.push_back({param, at::zeros_like(param), at::zeros_like(param), decay});
}

void AdamW::step(double lr, const std::vector<at::Tensor>& grads) {
  c10::NoGradGuard no_grad;
  ++step_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(step_));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(cfg_.beta2, static_cast<double>(step_)));
  const double step_size = lr / bc1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!grads[i].defined()) continue;
    auto& s = slots_[i];
    const auto& g = grads[i];
    if (s.decay && cfg_.weight_decay != 0.0) s.param.mul_(1.0 - lr * cfg_.weight_decay);
    s.exp_avg.lerp_(g, 1.0 - cfg_.beta1);
    s.exp_avg_sq.mul_(cfg_.beta2).addcmul_(g, g, 1.0 - cfg_.beta2);
    auto denom = (s.exp_avg_sq.sqrt() / bc2_sqrt).add_(cfg_.eps);
    s.param.addcdiv_(s.exp_avg, denom, -step_size);
  }
}

double grad_sq_norm(const std::vector<at::Tensor>& grads) {
  at::Tensor total;  // summed where the gradients live: one host sync, not one per tensor
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) {
      auto t = g.to(at::kDouble).pow(2).sum();
      total = total.defined() ? total + t : t;
    }
  return total.defined() ? total.item<double>() : 0.0;
}

void scale_grads(const std::vector<at::Tensor>& grads, double total_norm, double max_norm) {
  if (max_norm <= 0) return;
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return;
  c10::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) g.mul_(coef);
}

}  // namespace shardtrain
