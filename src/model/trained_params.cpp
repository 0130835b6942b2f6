#include "shardtrain/model/trained_params.h"

namespace shardtrain::model {
namespace {

// Full fine-tuning: every parameter trains from an fp32 master.
class FullTraining final : public TrainedParams {
 public:
  explicit FullTraining(const ModelConfig& m) : model_(m), specs_(llama_param_specs(m)) {}
  const std::vector<ParamSpec>& trainable_specs() const override { return specs_; }
  bool base_frozen() const override { return false; }
  at::Tensor init_trainable(const ParamSpec& spec, uint64_t seed) const override {
    return init_param(spec, seed, model_.initializer_range);
  }
  std::string trainable_key(const std::string& name) const override { return name; }
  double backward_flops_ratio() const override { return 2.0; }
  ActivationBytes activation_bytes(int elt, const PackedRows* packed) const override {
    return activation_bytes_per_token(model_, elt, nullptr, packed);
  }

 private:
  ModelConfig model_;
  std::vector<ParamSpec> specs_;
};

// The base is frozen in the compute dtype; each targeted projection trains A and B (PEFT's).
class LoraTraining final : public TrainedParams {
 public:
  LoraTraining(const ModelConfig& m, const LoraConfig& lora)
      : model_(m), lora_(lora), specs_(lora_param_specs(m, lora)) {}
  const std::vector<ParamSpec>& trainable_specs() const override { return specs_; }
  bool base_frozen() const override { return true; }
  at::Tensor init_trainable(const ParamSpec& spec, uint64_t seed) const override {
    return init_lora_param(spec, seed);
  }
  std::string trainable_key(const std::string& name) const override { return peft_key(name); }
  double backward_flops_ratio() const override { return 1.0; }
  ActivationBytes activation_bytes(int elt, const PackedRows* packed) const override {
    return activation_bytes_per_token(model_, elt, &lora_, packed);
  }

 private:
  ModelConfig model_;
  LoraConfig lora_;
  std::vector<ParamSpec> specs_;
};

}  // namespace

std::unique_ptr<TrainedParams> full_training(const ModelConfig& model) {
  return std::make_unique<FullTraining>(model);
}

std::unique_ptr<TrainedParams> lora_training(const ModelConfig& model, const LoraConfig& lora) {
  return std::make_unique<LoraTraining>(model, lora);
}

}  // namespace shardtrain::model
