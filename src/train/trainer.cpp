#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>


namespace shardtrain {

Trainer::Trainer(ModelConfig model, TrainConfig cfg, ParamStore params)
    : model_(std::move(model)), cfg_(std::move(cfg)), params_(std::move(params)),
      rope_(model_, model_.max_position_embeddings), opt_(cfg_.adamw) {
  for (size_t i = 0; i < params_.specs().size(); ++i) opt_.add(params_.tensors()[i], !params_.specs()[i].is_norm);
}

at::Tensor Trainer::logits(const at::Tensor& tokens) {
  LocalWeights w(params_, cfg_.param_dtype);
  return llama_forward(model_, w, tokens, rope_, cfg_.param_dtype);
}

StepResult Trainer::step(const std::vector<Batch>& micro_batches, double lr) {
  StepResult r;
  for (const auto& mb : micro_batches) r.tokens += count_loss_tokens(mb.labels);
  for (auto& p : params_.tensors()) p.mutable_grad() = at::Tensor();
  double loss_sum = 0;
  for (const auto& mb : micro_batches) {
    if (mb.tokens.size(0) == 0) continue;  // a short final batch leaves some micro-steps empty
    auto ls = causal_lm_loss(logits(mb.tokens), mb.labels);
    (ls.sum / static_cast<double>(std::max<int64_t>(1, r.tokens))).backward();
    loss_sum += ls.sum.item<double>();
  }
  std::vector<at::Tensor> grads;
  for (auto& p : params_.tensors()) grads.push_back(p.grad());
  r.grad_norm = std::sqrt(grad_sq_norm(grads));
  scale_grads(grads, r.grad_norm, cfg_.grad_clip);
  opt_.step(lr, grads);
  r.loss = loss_sum / static_cast<double>(std::max<int64_t>(1, r.tokens));
  return r;
}

EvalResult evaluate_loss(const TokenFile& data, int64_t batch_size, int64_t max_batches, int rank, int world,
                         const LogitsFn& logits, const std::function<double(double)>& sum_all) {
  c10::NoGradGuard no_grad;
  LoaderConfig lc;
  lc.micro_batch = batch_size, lc.shuffle = false, lc.prefetch = false, lc.rank = rank, lc.world = world;
  DataLoader loader(data, lc);
  int64_t n = loader.steps_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  double sum = 0, count = 0;
  for (int64_t b = 0; b < n; ++b) {
    const StepData d = loader.next();
    const Batch& batch = d.micro.front();
    auto lg = logits(batch.tokens);
    if (batch.tokens.size(0) == 0) continue;
    auto ls = causal_lm_loss(lg, batch.labels);
    sum += ls.sum.item<double>(), count += static_cast<double>(ls.count);
  }
  if (sum_all) sum = sum_all(sum), count = sum_all(count);
  EvalResult r;
  r.tokens = static_cast<int64_t>(count);
  r.loss = sum / std::max(1.0, count);
  r.perplexity = std::exp(r.loss);
  return r;
}

EvalResult Trainer::evaluate(const TokenFile& data, int64_t max_batches) {
  return evaluate_loss(data, cfg_.batch_size, max_batches, 0, 1, logits_fn());
}

}  // namespace shardtrain
