// Which tensors of each unit train and which are a frozen base, their sizes and dtypes: the one
// answer the unit builder, the engine's memory and the planner share. Full fine-tuning trains
// the model's parameters (an fp32 master each); LoRA trains small adapters beside a base frozen
// in the compute dtype. Another kind of training (a quantized base, a frozen reference model)
// is one more implementation of TrainableLayout.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardtrain/fsdp/flat_layout.h"
#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/lora.h"
#include "shardtrain/model/params.h"

namespace shardtrain::fsdp {

struct UnitSize {
  model::UnitKind kind = model::UnitKind::kEmbedding;
  int64_t numel = 0, padded = 0, shard_numel = 0;  // elements: FlatLayout's
};
inline UnitSize unit_size(const FlatLayout& l, model::UnitKind kind) {
  return {kind, l.numel, l.padded, l.shard_numel};
}
// Every unit of `specs` (the model's or the adapters'), in model_units() order, sharded over
// shard_size.
std::vector<UnitSize> unit_sizes(const model::ModelConfig& model,
                                 const std::vector<model::ParamSpec>& specs, int shard_size);

// Every unit's sizes at one shard group size: the base, and the adapters where the base is frozen.
struct TrainingSizes {
  std::vector<UnitSize> base;      // the model's parameters, [units]
  std::vector<UnitSize> adapters;  // [units] when the base is frozen (a unit may have none); empty
                                   // when the base trains
  bool base_frozen() const { return !adapters.empty(); }
  const UnitSize& trainable(size_t u) const { return base_frozen() ? adapters[u] : base[u]; }
  bool trains(size_t u) const { return trainable(u).numel > 0; }
  int64_t gathered_numel(size_t u) const {
    return base[u].padded + (base_frozen() ? adapters[u].padded : 0);
  }
  std::vector<UnitSize> trainable_units() const;
};

// Whether each unit's backward runs: it trains, or a unit before it does and needs its input's
// gradient (a frozen embedding under LoRA runs none).
std::vector<bool> runs_backward(const TrainingSizes& sizes);

class TrainableLayout {
 public:
  virtual ~TrainableLayout() = default;
  const model::ModelConfig& model() const { return model_; }
  const std::vector<model::ParamSpec>& base_specs() const { return base_specs_; }
  // What trains and what checkpoints hold: the model's parameters, or the adapters.
  virtual const std::vector<model::ParamSpec>& trainable_specs() const = 0;
  virtual bool base_frozen() const = 0;
  // The dtype of a base shard: the fp32 master where it trains, else the compute dtype.
  at::ScalarType base_dtype(at::ScalarType compute) const {
    return base_frozen() ? compute : at::kFloat;
  }
  // A frozen base's trainable tensor: seeded (identical at any world size) ...
  virtual at::Tensor init_trainable(const model::ParamSpec& spec, uint64_t seed) const = 0;
  // ... or read from a file under this key (PEFT's adapter_model.safetensors names).
  virtual std::string trainable_key(const std::string& name) const = 0;
  // Backward's FLOPs over forward's: 2 (input and weight gradients), 1 where the weights are
  // frozen.
  virtual double backward_flops_ratio() const = 0;
  virtual model::ActivationBytes activation_bytes(int elt,
                                                  const model::PackedRows* packed) const = 0;
  TrainingSizes sizes(int shard_size) const;

 protected:
  explicit TrainableLayout(const model::ModelConfig& model);
  model::ModelConfig model_;
  std::vector<model::ParamSpec> base_specs_;
};

// The layout for a run: LoRA's when lora.enabled(), else full fine-tuning's.
std::unique_ptr<TrainableLayout> make_trainable_layout(const model::ModelConfig& model,
                                                       const model::LoraConfig& lora);

}  // namespace shardtrain::fsdp
