#include "oracle/trainer.h"

#include <ATen/ATen.h>

#include <cmath>

namespace shardtrain::oracle {

namespace {
optim::OptimizerConfig optimizer_config(const TrainConfig& c) {
  optim::OptimizerConfig o;
  o.adamw = c.adamw;
  o.grad_clip = c.grad_clip;
  return o;
}
}  // namespace

Trainer::Trainer(model::ModelConfig model, TrainConfig cfg, model::ParamStore params)
    : model_(std::move(model)),
      cfg_(std::move(cfg)),
      params_(std::move(params)),
      rope_(model_, model_.max_position_embeddings),
      opt_(optimizer_config(cfg_)) {
  for (size_t i = 0; i < params_.specs().size(); ++i)
    opt_.add(params_.tensors()[i], params_.specs()[i].decays());
}

at::Tensor Trainer::logits(const at::Tensor& tokens, const at::Tensor& positions) {
  const auto w = [this](const std::string& name) { return params_.get(name).to(cfg_.param_dtype); };
  model::LayerPath path;
  path.fp8 = cfg_.fp8;
  return model::llama_forward(model_, w, tokens, rope_, cfg_.param_dtype, nullptr, positions, path);
}

StepResult Trainer::step(const std::vector<model::Batch>& micro_batches, double lr) {
  StepResult r;
  for (const auto& mb : micro_batches) r.tokens += model::count_loss_tokens(mb.labels);
  for (auto& p : params_.tensors()) p.mutable_grad() = at::Tensor();
  double loss_sum = 0;
  for (const auto& mb : micro_batches) {
    if (mb.tokens.size(0) == 0) continue;  // a short final batch leaves some micro-steps empty
    auto ls = model::causal_lm_loss(logits(mb.tokens, mb.positions), mb.labels);
    (ls.sum / static_cast<double>(std::max<int64_t>(1, r.tokens))).backward();
    loss_sum += ls.sum.item<double>();
  }
  std::vector<at::Tensor> grads;
  for (auto& p : params_.tensors()) grads.push_back(p.grad());
  r.grad_norm = opt_.step(lr, grads);
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(1, r.tokens));
  return r;
}

train::EvalResult Trainer::evaluate(const data::TokenFile& data, int64_t max_batches) {
  return train::evaluate_loss(
      data, cfg_.batch_size, max_batches, 0, 1, [this](const model::Batch& b) {
        if (b.tokens.size(0) == 0) return model::LossSum{};
        return model::causal_lm_loss(logits(b.tokens, b.positions), b.labels);
      });
}

}  // namespace shardtrain::oracle
