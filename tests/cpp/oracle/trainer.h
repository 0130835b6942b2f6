// The single-rank trainer: the test oracle the FSDP engine is compared with. It is checked
// against Hugging Face transformers + torch.optim.AdamW (test_hf_parity), and runs the same
// model code (llama_forward) and the same optimizer component as the engine, over whole
// parameters with plain autograd and no sharding at all.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "shardtrain/data/token_file.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/optim/optimizer.h"
#include "shardtrain/train/validator.h"

namespace shardtrain::oracle {

struct TrainConfig {
  int64_t batch_size = 8;                   // for evaluate()
  at::ScalarType param_dtype = at::kFloat;  // compute dtype; master weights stay fp32
  optim::AdamWConfig adamw;
  double grad_clip = 1.0;                     // <= 0 disables clipping
  model::Fp8Mode fp8 = model::Fp8Mode::kOff;  // the projections' GEMMs (model/fp8.h)
};

struct StepResult {
  double loss = 0;       // mean over the batch's loss tokens
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;
};

class Trainer {
 public:
  Trainer(model::ModelConfig model, TrainConfig cfg, model::ParamStore params);

  // One optimizer step over the micro-batches; the loss is normalized by their total token
  // count so accumulation equals one big batch.
  StepResult step(const std::vector<model::Batch>& micro_batches, double lr);
  train::EvalResult evaluate(const data::TokenFile& data, int64_t max_batches);
  at::Tensor logits(const at::Tensor& tokens, const at::Tensor& positions = {});

  model::ParamStore& params() { return params_; }
  const model::ModelConfig& model() const { return model_; }
  optim::AdamW& optimizer() { return opt_.adamw(); }

 private:
  model::ModelConfig model_;
  TrainConfig cfg_;
  model::ParamStore params_;
  model::Rotary rope_;
  optim::Optimizer opt_;
};

}  // namespace shardtrain::oracle
