#include "shardtrain/fsdp/trainable_layout.h"

#include "shardtrain/runtime/error.h"

namespace shardtrain::fsdp {
namespace {

// Full fine-tuning: every parameter trains from an fp32 master.
class FullTraining final : public TrainableLayout {
 public:
  explicit FullTraining(const model::ModelConfig& m) : TrainableLayout(m) {}
  const std::vector<model::ParamSpec>& trainable_specs() const override { return base_specs_; }
  bool base_frozen() const override { return false; }
  at::Tensor init_trainable(const model::ParamSpec& spec, uint64_t seed) const override {
    return model::init_param(spec, seed, model_.initializer_range);
  }
  std::string trainable_key(const std::string& name) const override { return name; }
  double backward_flops_ratio() const override { return 2.0; }
  model::ActivationBytes activation_bytes(int elt, const model::PackedRows* packed) const override {
    return model::activation_bytes_per_token(model_, elt, nullptr, packed);
  }
};

// LoRA: the base is frozen in the compute dtype; each targeted projection trains A and B (PEFT's).
class LoraTraining final : public TrainableLayout {
 public:
  LoraTraining(const model::ModelConfig& m, const model::LoraConfig& lora)
      : TrainableLayout(m), lora_(lora), specs_(model::lora_param_specs(m, lora)) {}
  const std::vector<model::ParamSpec>& trainable_specs() const override { return specs_; }
  bool base_frozen() const override { return true; }
  at::Tensor init_trainable(const model::ParamSpec& spec, uint64_t seed) const override {
    return model::init_lora_param(spec, seed);
  }
  std::string trainable_key(const std::string& name) const override {
    return model::peft_key(name);
  }
  double backward_flops_ratio() const override { return 1.0; }
  model::ActivationBytes activation_bytes(int elt, const model::PackedRows* packed) const override {
    return model::activation_bytes_per_token(model_, elt, &lora_, packed);
  }

 private:
  model::LoraConfig lora_;
  std::vector<model::ParamSpec> specs_;
};

}  // namespace

std::vector<UnitSize> unit_sizes(const model::ModelConfig& model,
                                 const std::vector<model::ParamSpec>& specs, int shard_size) {
  std::vector<UnitSize> out;
  const auto units = model::model_units(model);
  for (int64_t u = 0; u < static_cast<int64_t>(units.size()); ++u)
    out.push_back(unit_size(flat_layout(specs, u, shard_size), units[u].kind));
  return out;
}

std::vector<UnitSize> TrainingSizes::trainable_units() const {
  return base_frozen() ? adapters : base;
}

std::vector<bool> runs_backward(const TrainingSizes& sizes) {
  std::vector<bool> runs(sizes.base.size());
  bool trains_before = false;  // some unit before this one trains
  for (size_t u = 0; u < runs.size(); ++u) {
    runs[u] = trains_before || sizes.trains(u);
    trains_before = runs[u];
  }
  return runs;
}

TrainableLayout::TrainableLayout(const model::ModelConfig& model)
    : model_(model), base_specs_(model::llama_param_specs(model)) {}

TrainingSizes TrainableLayout::sizes(int shard_size) const {
  TrainingSizes s;
  s.base = unit_sizes(model_, base_specs_, shard_size);
  if (base_frozen()) s.adapters = unit_sizes(model_, trainable_specs(), shard_size);
  return s;
}

std::unique_ptr<TrainableLayout> make_trainable_layout(const model::ModelConfig& model,
                                                       const model::LoraConfig& lora) {
  if (lora.enabled()) return std::make_unique<LoraTraining>(model, lora);
  return std::make_unique<FullTraining>(model);
}

}  // namespace shardtrain::fsdp
