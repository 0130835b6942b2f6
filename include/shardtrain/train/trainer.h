// The single-rank trainer: the reference the FSDP engine is tested against, and the model that
// eval and generate run. `train` itself runs fsdp::FsdpEngine through train/fit.h.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardtrain/data/loader.h"
#include "shardtrain/data/token_file.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/train/adamw.h"
#include "shardtrain/train/lr_schedule.h"
#include "shardtrain/train/phases.h"
#include "shardtrain/train/metrics.h"

namespace shardtrain {

struct TrainConfig {
  int64_t steps = 0;   // optimizer steps; 0: derive from epochs
  int64_t epochs = 1;
  int64_t batch_size = 8;  // micro-batch per rank
  int64_t seq_len = 64;    // from the data file
  int64_t grad_accum = 1;
  uint64_t seed = 1234;
  LrSchedule schedule;
  AdamWConfig adamw;
  double grad_clip = 1.0;  // <= 0 disables clipping
  at::ScalarType param_dtype = at::kFloat;  // compute dtype; master weights stay fp32
  int64_t val_every = 0;   // 0: validate only at the end
  int64_t val_batches = 8;  // <= 0: the whole validation file
  int64_t log_every = 10;
  std::string metrics_file;
  double peak_tflops = 0;  // per device, for MFU
};

struct StepResult {
  double loss = 0;       // mean over the global batch's loss tokens
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;
  PhaseTimes phases;     // forward, backward, optimizer, exposed_comm (the loop adds the rest)
};

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
  int64_t tokens = 0;
};

// Forward-only loss over a token file, in file order. Each rank takes its part of every batch
// and runs every batch, even an empty part (a sharded forward is collective); `sum_all` totals
// across ranks (none: one rank).
EvalResult evaluate_loss(const TokenFile& data, int64_t batch_size, int64_t max_batches, int rank, int world,
                         const LogitsFn& logits, const std::function<double(double)>& sum_all = {});

class Trainer {
 public:
  Trainer(ModelConfig model, TrainConfig cfg, ParamStore params);

  // One optimizer step over grad_accum micro-batches; the loss is normalized by the global
  // batch's token count so accumulation equals one big batch.
  StepResult step(const std::vector<Batch>& micro_batches, double lr);
  // Forward-only loss and perplexity, over at most max_batches (<= 0: all) in order.
  EvalResult evaluate(const TokenFile& data, int64_t max_batches);
  at::Tensor logits(const at::Tensor& tokens);
  LogitsFn logits_fn() {
    return [this](const at::Tensor& t) { return logits(t); };
  }

  ParamStore& params() { return params_; }
  const ModelConfig& model() const { return model_; }
  AdamW& optimizer() { return opt_; }

 private:
  ModelConfig model_;
  TrainConfig cfg_;
  ParamStore params_;
  Rotary rope_;
  AdamW opt_;
};

}  // namespace shardtrain
