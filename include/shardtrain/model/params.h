// The model's parameters by Hugging Face LlamaForCausalLM name, in fp32 (the master copy).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/config.h"

namespace shardtrain {

struct ParamSpec {
  std::string name;            // e.g. model.layers.3.self_attn.q_proj.weight
  std::vector<int64_t> shape;  // logical shape, as in Hugging Face
  bool is_norm = false;        // RMSNorm weights: initialized to 1, no weight decay
  int64_t unit = 0;            // FSDP unit: 0 embeddings, 1..L decoder layers, L+1 norm + lm_head
  int64_t numel() const;
};

// Hugging Face order: embeddings, each layer (q k v o gate up down, two norms), norm, lm_head.
std::vector<ParamSpec> llama_param_specs(const ModelConfig& cfg);

// Deterministic per-parameter init: the same tensor whatever world size or strategy asks for it,
// because each parameter draws from its own generator seeded by (seed, name).
at::Tensor init_param(const ParamSpec& spec, uint64_t seed, double std = 0.02);

class ParamStore {
 public:
  static ParamStore initialize(const ModelConfig& cfg, uint64_t seed);
  // Checks every tensor's presence, shape and dtype; converts to fp32 master weights.
  static ParamStore load(const ModelConfig& cfg, const SafetensorsModel& weights);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::vector<at::Tensor>& tensors() { return tensors_; }
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  const at::Tensor& get(const std::string& name) const;
  NamedTensors named() const;
  int64_t numel() const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<at::Tensor> tensors_;  // fp32 leaves with requires_grad
  std::map<std::string, size_t> index_;
};

}  // namespace shardtrain
