#include "shardtrain/train/validator.h"

#include <c10/core/GradMode.h>

#include <cmath>

#include "shardtrain/data/loader.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/train/sft_objective.h"

namespace shardtrain::train {

void for_each_batch(const data::TokenFile& data, int64_t batch_size, int64_t max_batches, int rank,
                    int world, const std::function<void(const model::Batch&)>& fn) {
  data::LoaderConfig lc;
  lc.micro_batch = batch_size;
  lc.shuffle = false;
  lc.prefetch = false;
  lc.rank = rank;
  lc.world = world;
  data::DataLoader loader(data, lc);
  int64_t n = loader.steps_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  for (int64_t b = 0; b < n; ++b) fn(loader.next().micro.front());
}

model::PreferenceMetrics evaluate_preference(const data::TokenFile& data, int64_t batch_size,
                                             int64_t max_batches, int rank, int world,
                                             const BatchStatsFn& stats,
                                             const std::function<double(double)>& sum_all) {
  c10::NoGradGuard no_grad;
  at::Tensor sum = at::zeros({model::kNumPreferenceStats}, at::kDouble);
  for_each_batch(data, batch_size, max_batches, rank, world,
                 [&](const model::Batch& batch) { sum += stats(batch).to(at::kCPU, at::kDouble); });
  if (sum_all)
    for (int64_t k = 0; k < sum.numel(); ++k) sum[k] = sum_all(sum[k].item<double>());
  return model::preference_metrics(sum);
}

EvalResult evaluate_loss(const data::TokenFile& data, int64_t batch_size, int64_t max_batches,
                         int rank, int world, const BatchLossFn& loss,
                         const std::function<double(double)>& sum_all) {
  c10::NoGradGuard no_grad;
  at::Tensor sum_t;  // summed where the logits are: one host read at the end, not one per batch
  double count = 0;
  for_each_batch(data, batch_size, max_batches, rank, world, [&](const model::Batch& batch) {
    const model::LossSum l = loss(batch);
    if (!l.sum.defined()) return;  // no rows here
    const at::Tensor s = l.sum.to(at::kDouble);
    sum_t = sum_t.defined() ? sum_t + s : s;
    count += static_cast<double>(l.count);
  });
  double sum = sum_t.defined() ? sum_t.item<double>() : 0.0;
  if (sum_all) {
    sum = sum_all(sum);
    count = sum_all(count);
  }
  EvalResult r;
  r.tokens = static_cast<int64_t>(count);
  r.loss = sum / std::max(1.0, count);
  r.perplexity = std::exp(r.loss);
  return r;
}

std::unique_ptr<AccuracyTask> load_accuracy_task(const AccuracyConfig& o,
                                                 const model::ModelConfig& model) {
  if (o.file.empty()) return nullptr;
  data::DataFormat fmt = o.format;
  auto task = std::make_unique<AccuracyTask>(
      AccuracyTask{data::Tokenizer(o.tokenizer), {}, o.max_new_tokens});
  task->tokenizer.require_fits(model.vocab_size);
  task->records = data::read_records(o.file, fmt, o.samples);
  if (task->records.empty())
    throw runtime::UsageError("--accuracy-file " + o.file + " has no usable records");
  for (const data::Record& r :
       task->records)  // checked here, before training, not at the first validation
    if (r.prompt.empty())
      throw runtime::UsageError(
          "--accuracy-file " + o.file +
          ": exact-match accuracy needs prompt/answer records (alpaca or samsum), not plain text");
  return task;
}

Validator::Validator(fsdp::FsdpEngine& engine, comm::ParallelDims& dims, const data::TokenFile* val,
                     const AccuracyTask* accuracy, int64_t batch_size, int64_t max_batches,
                     int64_t every)
    : engine_(engine),
      dims_(dims),
      val_(val),
      accuracy_(accuracy),
      batch_size_(batch_size),
      max_batches_(max_batches),
      every_(every) {}

EvalResult Validator::loss() {
  SftObjective sft;
  const BatchLossFn loss = [&](const model::Batch& b) {
    const model::MicroBatch mb = fsdp::context_split(b, dims_);
    model::LossSum r;
    r.sum = engine_.evaluate(mb, sft);
    if (r.sum.defined())
      r.count = model::count_loss_tokens(mb.local().labels, mb.local().aligned_labels);
    return r;
  };
  const comm::ParallelDims& g = dims_;
  return evaluate_loss(*val_, batch_size_, max_batches_, g.data_rank(), g.data_world(), loss,
                       [this](double v) { return dims_.world->all_reduce_sum(v); });
}

AccuracyResult Validator::accuracy() { return accuracy_->run(engine_.decoder()); }

model::PreferenceMetrics Validator::preference() {
  const comm::ParallelDims& g = dims_;
  return evaluate_preference(
      *val_, batch_size_, max_batches_, g.data_rank(), g.data_world(),
      [this](const model::Batch& b) {
        return engine_.evaluate(fsdp::context_split(b, dims_), *dpo_);
      },
      [this](double v) { return dims_.world->all_reduce_sum(v); });
}

void Validator::run(StepMetrics& m) {
  if (val_ && dpo_) {  // DPO: the held-out pairs' loss and metrics
    m.val_preference = preference();
    m.val_loss = m.val_preference.loss;
  } else if (val_) {
    m.val_loss = loss().loss;
  }
  if (accuracy_) m.val_accuracy = accuracy().exact_match;
}

}  // namespace shardtrain::train
