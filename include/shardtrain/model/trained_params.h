// What trains: the model's parameters (full fine-tuning, an fp32 master each), or small adapters
// beside a base frozen in the compute dtype. The sharding layer sizes, shards and checkpoints
// whatever this says without knowing which; another kind (a quantized base) is one more
// implementation.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"

namespace shardtrain::model {

class TrainedParams {
 public:
  virtual ~TrainedParams() = default;
  // What trains and what checkpoints hold: the model's parameters, or the adapters.
  virtual const std::vector<ParamSpec>& trainable_specs() const = 0;
  virtual bool base_frozen() const = 0;
  // A trainable tensor: seeded (identical at any world size) ...
  virtual at::Tensor init_trainable(const ParamSpec& spec, uint64_t seed) const = 0;
  // ... or read from a file under this key (the adapters' file names, e.g. PEFT's).
  virtual std::string trainable_key(const std::string& name) const = 0;
  // Backward's FLOPs over forward's: 2 (input and weight gradients), 1 where the weights are
  // frozen.
  virtual double backward_flops_ratio() const = 0;
  virtual ActivationBytes activation_bytes(int elt, const PackedRows* packed) const = 0;
};

// Full fine-tuning of `model`: every parameter trains.
std::unique_ptr<TrainedParams> full_training(const ModelConfig& model);
// Low-rank adapters (PEFT's LoRA) on `lora`'s targets, the base frozen.
std::unique_ptr<TrainedParams> lora_training(const ModelConfig& model, const LoraConfig& lora);

}  // namespace shardtrain::model
