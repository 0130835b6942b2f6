// The model's parameters by Hugging Face LlamaForCausalLM name, in fp32 (the master copy).
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/param_names.h"

namespace shardtrain::model {

// The model's units, which are also its FSDP units: the embedding, each decoder layer, and the
// head (final norm + lm_head).
enum class UnitKind { kEmbedding, kDecoderLayer, kHead };
struct UnitSpec {
  UnitKind kind = UnitKind::kEmbedding;
  int64_t layer = -1;  // decoder layers only: 0-based
};
std::vector<UnitSpec> model_units(const ModelConfig& cfg);  // [num_layers + 2], in forward order

// Hugging Face LlamaForCausalLM's parameter names: one table that specs, weight binding and
// checkpoints all read.

struct ParamSpec {
  std::string name;            // e.g. model.layers.3.self_attn.q_proj.weight
  std::vector<int64_t> shape;  // logical shape, as in Hugging Face
  bool is_norm = false;        // RMSNorm weights: initialized to 1, no weight decay
  int64_t unit = 0;            // index into model_units(): 0 embedding, 1..L layers, L+1 head
  bool is_bias = false;        // a projection's bias: initialized to 0, no weight decay
  bool zero_norm = false;      // a norm that scales by (1 + weight) (Gemma): initialized to 0
  int64_t expert = -1;         // a sparse layer's expert tensor: its expert (-1: none)
  int64_t numel() const;
  // Weight decay applies, as Hugging Face's Trainer groups it: not to norms, not to biases.
  bool decays() const { return !is_norm && !is_bias; }
};

// A decoder layer's RMSNorms by what they normalise: the queries and keys (QkNorm), and the
// inputs and outputs of the attention and MLP blocks (NormPlacement).
enum class NormRole { kQ, kK, kAttnIn, kAttnOut, kMlpIn, kMlpOut };
inline constexpr int kNumNormRoles = 6;
struct LayerNormSpec {
  NormRole role;
  const char* local;  // the name inside "model.layers.<i>." (param_names.h)
  int64_t size;       // the weight's length
};
// The family's norms of one layer (model/family.h), q and k first.
std::vector<LayerNormSpec> layer_norms(const ModelConfig& cfg);

// Hugging Face order: embeddings, each layer (q k v o gate up down, each weight followed by its
// bias if it has one; the layer's norms), norm, lm_head (absent when tied: the embedding serves).
std::vector<ParamSpec> llama_param_specs(const ModelConfig& cfg);

// Deterministic per-parameter init: the same tensor whatever world size or strategy asks for it,
// because each parameter draws from its own generator seeded by (seed, name).
at::Tensor init_param(const ParamSpec& spec, uint64_t seed,
                      double std);  // std: ModelConfig::initializer_range

// Throws UsageError naming the tensor and its file when the weights lack one of the model's
// tensors, or hold one whose shape differs from the model config's, or whose dtype is not
// F32, BF16 or F16. Reads only the headers.
void check_weights(const ModelConfig& cfg, const io::SafetensorsModel& weights);

class ParamStore {
 public:
  static ParamStore initialize(const ModelConfig& cfg, uint64_t seed);
  // Checks every tensor's presence, shape and dtype; converts to fp32 master weights.
  static ParamStore load(const ModelConfig& cfg, const io::SafetensorsModel& weights);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::vector<at::Tensor>& tensors() { return tensors_; }
  const std::vector<at::Tensor>& tensors() const { return tensors_; }
  const at::Tensor& get(const std::string& name) const;
  io::NamedTensors named() const;
  int64_t numel() const;

 private:
  std::vector<ParamSpec> specs_;
  std::vector<at::Tensor> tensors_;  // fp32 leaves with requires_grad
  std::map<std::string, size_t> index_;
};

}  // namespace shardtrain::model
