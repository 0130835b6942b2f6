#include "shardtrain/optim/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "shardtrain/runtime/error.h"

namespace shardtrain::optim {

void AdamWConfig::validate() const {
  if (weight_decay < 0) throw runtime::UsageError("--weight-decay must be >= 0");
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) throw runtime::UsageError("--beta1 and --beta2 must be in [0, 1)");
  if (!(eps > 0)) throw runtime::UsageError("--adam-eps must be positive");
}

void AdamW::add(const at::Tensor& param, bool decay) {
  slots_.push_back({param, at::zeros_like(param), at::zeros_like(param), decay});
}

void AdamW::step(double lr, const std::vector<at::Tensor>& grads) {
  c10::NoGradGuard no_grad;
  ++step_;
  // torch.optim.AdamW(fused=True): one multi-tensor kernel per weight-decay group instead of
  // eight elementwise ops per tensor. The kernel reads each tensor's step; ours share one.
  std::vector<at::Tensor> p[2], g[2], m[2], v[2], steps[2];
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!grads[i].defined() || slots_[i].param.numel() == 0) continue;
    const int k = slots_[i].decay ? 1 : 0;
    auto& s = slots_[i];
    if (!step_t_.defined() || step_t_.device() != s.param.device())
      step_t_ = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(s.param.device()));
    p[k].push_back(s.param), g[k].push_back(grads[i]), m[k].push_back(s.exp_avg), v[k].push_back(s.exp_avg_sq);
  }
  if (step_t_.defined()) step_t_.fill_(static_cast<double>(step_));
  for (int k = 0; k < 2; ++k) {
    if (p[k].empty()) continue;
    steps[k].assign(p[k].size(), step_t_);
    at::_fused_adamw_(p[k], g[k], m[k], v[k], {}, steps[k], lr, cfg_.beta1, cfg_.beta2, k ? cfg_.weight_decay : 0.0,
                      cfg_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

double grad_sq_norm(const std::vector<at::Tensor>& grads) {
  std::vector<at::Tensor> live;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) live.push_back(g);
  if (live.empty()) return 0.0;
  // fp32 per-tensor norms from the foreach kernel, squared and summed where they live: one host
  // sync and no fp64 copy of any gradient. Shards' squares add across ranks in the caller.
  const auto norms = at::stack(at::_foreach_norm(live, 2));
  return norms.to(at::kDouble).pow(2).sum().item<double>();
}

void scale_grads(const std::vector<at::Tensor>& grads, double total_norm, double max_norm) {
  if (max_norm <= 0) return;
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1.0) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> live;
  for (const auto& g : grads)
    if (g.defined()) live.push_back(g);
  at::_foreach_mul_(live, coef);
}

}  // namespace shardtrain::optim
