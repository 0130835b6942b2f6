// Llama-2 architecture hyper-parameters: named presets, Hugging Face config.json, validation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardtrain/model/rope_scaling.h"

namespace shardtrain::model {

struct ModelConfig {
  std::string name = "custom";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_layers = 32;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 32;  // < num_heads is grouped-query attention (Llama-2 70B: 8)
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;  // config.json's rope_scaling (or rope_parameters' rope_type and its keys)
  std::string hidden_act = "silu";  // the MLP's activation: one of hidden_acts()
  double initializer_range = 0.02;  // the std of the seeded init (transformers' _init_weights)
  // config.json's "torch_dtype" (transformers >= 4.56: "dtype"): what its weights are stored in; "" when not given.
  std::string torch_dtype;
  // config.json fields shardtrain does not know: ignored, and named in a warning (config_fields.h).
  std::vector<std::string> unknown_fields;

  int64_t head_dim() const { return hidden_size / num_heads; }
  // Throws UsageError naming the option (and config.json key) to change.
  void validate() const;
  int64_t num_params() const;
  int64_t num_embedding_params() const { return vocab_size * hidden_size; }
};

// config.json's hidden_act values shardtrain implements, as transformers' ACT2FN computes them.
const std::vector<std::string>& hidden_acts();

std::vector<std::string> model_preset_names();
// Throws UsageError listing the presets when the name is unknown.
ModelConfig model_preset(const std::string& name);
// `spec` is a preset name, a config.json, or a directory holding config.json.
ModelConfig resolve_model(const std::string& spec);
ModelConfig model_from_hf_json(const nlohmann::json& j, const std::string& origin);
// config.json's text: invalid JSON and every defect throw UsageError naming origin.
ModelConfig model_from_hf_text(const std::string& text, const std::string& origin);
nlohmann::json model_to_hf_json(const ModelConfig& c);
// The fields that set tensor shapes, for messages: "vocab 512, hidden 64, ..., 4 kv heads".
std::string describe_shape(const ModelConfig& c);
bool same_shape(const ModelConfig& a, const ModelConfig& b);

}  // namespace shardtrain::model
