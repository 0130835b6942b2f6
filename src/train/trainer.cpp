#include "shardtrain/train/trainer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>

#include "shardtrain/runtime/logging.h"
#include "shardtrain/train/flops.h"

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

EvalResult Trainer::evaluate(const TokenFile& data, int64_t max_batches) {
  c10::NoGradGuard no_grad;
  LoaderConfig lc;
  lc.micro_batch = cfg_.batch_size, lc.shuffle = false, lc.prefetch = false;
  DataLoader loader(data, lc);
  int64_t n = loader.steps_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  double sum = 0;
  EvalResult r;
  for (int64_t b = 0; b < n; ++b) {
    const StepData d = loader.next();
    const Batch& batch = d.micro.front();
    auto ls = causal_lm_loss(logits(batch.tokens), batch.labels);
    sum += ls.sum.item<double>();
    r.tokens += ls.count;
  }
  r.loss = sum / static_cast<double>(std::max<int64_t>(1, r.tokens));
  r.perplexity = std::exp(r.loss);
  return r;
}

void Trainer::fit(DataLoader& loader, const Validation& val) {
  const int64_t per_epoch = loader.steps_per_epoch();
  const int64_t total = cfg_.steps > 0 ? cfg_.steps : cfg_.epochs * per_epoch;
  LrSchedule sched = cfg_.schedule;
  sched.total_steps = total;
  MetricsWriter metrics(cfg_.metrics_file);
  const double fpt = flops_per_token(model_, cfg_.seq_len);
  log::info("training " + model_.name + " (" + std::to_string(params_.numel()) + " parameters) for " +
            std::to_string(total) + " steps, " + std::to_string(per_epoch) + " steps/epoch");
  if (val.accuracy) {  // the starting point, so the climb is visible
    StepMetrics m0;
    m0.val_accuracy = val.accuracy();
    if (val.data) m0.val_loss = evaluate(*val.data, cfg_.val_batches).loss;
    log::info("before training: val_loss " + std::to_string(m0.val_loss) + " | exact_match " +
              std::to_string(100.0 * m0.val_accuracy) + "%");
    metrics.write(m0);
  }
  for (int64_t s = 0; s < total; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepData data = loader.next();
    StepMetrics m;
    m.step = s + 1;
    m.epoch = data.position.epoch;
    m.lr = sched.at(s, m.epoch);
    const StepResult r = step(data.micro, m.lr);
    m.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    m.loss = r.loss, m.grad_norm = r.grad_norm, m.tokens = r.tokens;
    int64_t input_tokens = 0;
    for (const auto& mb : data.micro) input_tokens += mb.tokens.numel();
    fill_throughput(m, input_tokens, fpt, cfg_.peak_tflops, 1);
    m.peak_mem_bytes = peak_host_memory_bytes();
    const bool last = s + 1 == total;
    if ((cfg_.val_every > 0 && m.step % cfg_.val_every == 0) || last) {
      if (val.data) m.val_loss = evaluate(*val.data, cfg_.val_batches).loss;
      if (val.accuracy) m.val_accuracy = val.accuracy();
    }
    metrics.write(m);
    if (m.step == 1 || last || m.step % cfg_.log_every == 0 || m.val_loss >= 0 || m.val_accuracy >= 0) log::info(progress_line(m, total));
  }
}

}  // namespace shardtrain
