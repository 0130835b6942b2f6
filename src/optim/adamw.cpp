#include "shardtrain/optim/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "shardtrain/runtime/error.h"

namespace shardtrain::optim {

void AdamWConfig::validate() const {
  if (weight_decay < 0) throw runtime::UsageError("--weight-decay must be >= 0");
  if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1)
    throw runtime::UsageError("--beta1 and --beta2 must be in [0, 1)");
  if (!(eps > 0)) throw runtime::UsageError("--adam-eps must be positive");
}

void AdamW::add(const at::Tensor& param, bool decay) {
  slots_.push_back({param, at::zeros_like(param), at::zeros_like(param), decay});
}

int64_t AdamW::step_count() const {
  return step_t_.defined() ? static_cast<int64_t>(std::llround(step_t_.item<double>())) : step_;
}

void AdamW::set_step_count(int64_t s) {
  step_ = s;
  step_t_ = at::Tensor();  // made again from step_ on the parameters' device
}

void AdamW::step(double lr, const std::vector<at::Tensor>& grads, const at::Tensor& skip,
                 const at::Tensor& grad_scale) {
  const at::Tensor found_inf = begin_step(skip);
  step_slots(lr, grads, 0, slots_.size(), found_inf, grad_scale);
  end_step(found_inf);
}

at::Tensor AdamW::begin_step(const at::Tensor& skip) {
  c10::NoGradGuard no_grad;
  if (!step_t_
           .defined()) {  // every rank counts every step, whether its shards hold anything or not
    const at::Device device = slots_.empty() ? at::Device(at::kCPU) : slots_.front().param.device();
    step_t_ = at::full({}, static_cast<double>(step_),
                       at::TensorOptions().dtype(at::kFloat).device(device));
  }
  // As torch.optim's fused path with a GradScaler: count the step, let the kernel skip on
  // found_inf, uncount it (end_step).
  const at::Tensor found_inf =
      skip.defined() ? skip.to(step_t_.device(), at::kFloat).reshape({}) : at::Tensor();
  step_t_.add_(1);
  return found_inf;
}

void AdamW::step_slots(double lr, const std::vector<at::Tensor>& grads, size_t first, size_t last,
                       const at::Tensor& found_inf, const at::Tensor& grad_scale) {
  c10::NoGradGuard no_grad;
  // torch.optim.AdamW(fused=True): one multi-tensor kernel per weight-decay group instead of
  // eight elementwise ops per tensor. The kernel reads each tensor's step; ours share one.
  std::vector<at::Tensor> p[2], g[2], m[2], v[2], steps[2];
  for (size_t i = first; i < last; ++i) {
    const at::Tensor& grad = grads[i - first];
    if (!grad.defined() || slots_[i].param.numel() == 0) continue;
    const int k = slots_[i].decay ? 1 : 0;
    auto& s = slots_[i];
    p[k].push_back(s.param);
    g[k].push_back(grad);
    m[k].push_back(s.exp_avg);
    v[k].push_back(s.exp_avg_sq);
  }
  for (int k = 0; k < 2; ++k) {
    if (p[k].empty()) continue;
    steps[k].assign(p[k].size(), step_t_);
    at::_fused_adamw_(p[k], g[k], m[k], v[k], {}, steps[k], lr, cfg_.beta1, cfg_.beta2,
                      k ? cfg_.weight_decay : 0.0, cfg_.eps, /*amsgrad=*/false, /*maximize=*/false,
                      grad_scale.defined() ? std::optional<at::Tensor>(grad_scale) : std::nullopt,
                      found_inf.defined() ? std::optional<at::Tensor>(found_inf) : std::nullopt);
  }
}

void AdamW::end_step(const at::Tensor& found_inf) {
  c10::NoGradGuard no_grad;
  if (found_inf.defined()) step_t_.sub_(found_inf);
}

at::Tensor grad_sq_norm(const std::vector<at::Tensor>& grads, const at::Device& device) {
  std::vector<at::Tensor> live;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) live.push_back(g);
  if (live.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device));
  // fp32 per-tensor norms from the foreach kernel, squared and summed where they live: no host
  // read and no fp64 copy of any gradient. Shards' squares add across ranks in the caller.
  const auto norms = at::stack(at::_foreach_norm(live, 2));
  return norms.to(at::kDouble).pow(2).sum();
}

void scale_grads(const std::vector<at::Tensor>& grads, const at::Tensor& total_norm,
                 double max_norm) {
  if (max_norm <= 0) return;
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> live;
  for (const auto& g : grads)
    if (g.defined()) live.push_back(g);
  if (live.empty()) return;
  // min(1, ...) on the device: a coefficient of 1 leaves every gradient bit for bit as it was.
  const at::Tensor coef =
      (max_norm / (total_norm + 1e-6)).clamp_max(1.0).to(live.front().device(), at::kFloat);
  at::_foreach_mul_(live, coef);
}

at::Tensor clip_divisor(const at::Tensor& total_norm, double max_norm, const at::Device& device) {
  return ((total_norm + 1e-6) / max_norm).clamp_min(1.0).to(device, at::kFloat);
}

}  // namespace shardtrain::optim
