// The architecture's hyper-parameters (every family of model/family.h: one decoder with switches):
// named presets, Hugging Face config.json, validation.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardtrain/model/rope_scaling.h"

namespace shardtrain::model {

// The architectures transformers builds from config.json's model_type; all are this decoder.
const std::vector<std::string>& model_types();

struct ModelConfig {
  std::string name = "custom";
  std::string model_type = "llama";  // one of model_types() (model/family.h)
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_layers = 32;
  int64_t num_heads = 32;
  int64_t num_kv_heads = 32;  // < num_heads is grouped-query attention (Llama-2 70B: 8)
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling
      rope_scaling;  // config.json's rope_scaling (or rope_parameters' rope_type and its keys)
  std::string hidden_act = "silu";  // the MLP's activation: one of hidden_acts()
  double initializer_range = 0.02;  // the std of the seeded init (transformers' _init_weights)
  int64_t explicit_head_dim = 0;    // config.json's head_dim; 0: hidden_size / num_heads
  bool attention_bias =
      false;              // llama: q, k, v and o have biases (qwen2: q, k, v always; has_bias())
  bool mlp_bias = false;  // llama: gate, up and down have biases
  bool tie_word_embeddings = false;  // lm_head is the embedding matrix: one parameter
  // Attention reaches back sliding_window positions (the query's own included) in the layers
  // that slide; 0: every layer attends to the whole prefix. Mistral: every layer; Qwen2 (with
  // use_sliding_window): the layers layer_types marks "sliding_attention".
  int64_t sliding_window = 0;
  std::vector<bool>
      sliding_layers;  // qwen2: [num_layers]; empty: all layers slide when sliding_window > 0
  int64_t max_window_layers = 0;  // qwen2's config field, kept for exports
  // Gemma: scores scale by query_pre_attn_scalar^-0.5 (0: head_dim^-0.5), and soft-capping
  // (cap * tanh(x / cap); 0: none) of the attention scores and of the final logits.
  double query_pre_attn_scalar = 0;
  double attn_softcap = 0;
  double final_softcap = 0;
  // Gemma 3: the sliding layers' RoPE base (rope_local_base_freq), unscaled; 0: every layer
  // takes rope_theta and rope_scaling.
  double rope_local_theta = 0;
  // Phi-4-mini: RoPE turns the first partial_rotary_factor of each head's dimensions only.
  double partial_rotary_factor = 1.0;
  // Mixture of experts (Mixtral, Qwen3-MoE; 0 experts: dense). A sparse layer's router picks
  // experts_per_token of num_experts experts for each token (softmax in fp32, top-k, the weights
  // renormalised to sum 1 where norm_topk_prob), each an MLP of expert_intermediate_size.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;
  bool norm_topk_prob = true;
  int64_t decoder_sparse_step = 1;       // Qwen3-MoE: layers l with (l + 1) % step == 0 are sparse
  std::vector<int64_t> mlp_only_layers;  // Qwen3-MoE: dense layers among them
  // output_router_logits: training adds router_aux_loss_coef times transformers'
  // load_balancing_loss_func to the loss (model/moe.h's RouterAux).
  bool output_router_logits = false;
  double router_aux_loss_coef = 0;
  // config.json's "torch_dtype" (transformers >= 4.56: "dtype"): what its weights are stored in; ""
  // when not given.
  std::string torch_dtype;
  // config.json's pad_token_id (or the family's default): transformers' nn.Embedding padding_idx,
  // whose row the embedding lookup gives no gradient (negative values counted from the end);
  // -1: none.
  int64_t pad_token_id = -1;
  // config.json's bos/eos/pad_token_id as given, a JSON object kept for exports ("": Llama-2's 1
  // and 2).
  std::string special_token_ids;
  // config.json fields shardtrain does not know: ignored, and named in a warning (config_fields.h).
  std::vector<std::string> unknown_fields;

  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads;
  }
  // How far back layer `layer` attends (0: the whole prefix).
  int64_t attention_window(int64_t layer) const;
  // Whether layer `layer` is one of layer_types' sliding layers (its window may reach the row).
  bool sliding_layer(int64_t layer) const;
  // Whether layer `layer` is a mixture of experts (its MLP a router and experts).
  bool moe_layer(int64_t layer) const;
  bool is_moe() const { return num_experts > 0; }
  // The dimensions of a head RoPE turns: int(head_dim * partial_rotary_factor), as transformers.
  int64_t rotary_dim() const;
  // What multiplies q so that SDPA's head_dim^-0.5 gives the family's score scale (1: none).
  double query_scale() const;
  // Throws UsageError naming the option (and config.json key) to change.
  void validate() const;
  int64_t num_params() const;  // every parameter once: a tied lm_head is the embedding
  int64_t num_embedding_params() const { return vocab_size * hidden_size; }
  // The parameters that take part in matmuls (every one but the embedding lookup; a tied
  // lm_head counts, since the head multiplies by it): the N of 6 N flops per token.
  int64_t num_matmul_params() const;
  // The matmul parameters one token passes through: a sparse layer's router and its
  // experts_per_token experts, not all of them (= num_matmul_params() for a dense model).
  int64_t num_active_matmul_params() const;
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

// A mixture-of-experts config.json's fields (Mixtral, Qwen3-MoE), read and written as
// MixtralConfig and Qwen3MoeConfig do (defined in moe_config.cpp).
// Into c (its model_type set): nothing for a dense family. Throws UsageError naming the field for
// a value shardtrain does not implement (router jitter, the load-balancing loss's logits).
void read_moe_fields(const nlohmann::json& j, const std::string& origin, ModelConfig& c);
// The same fields for an export's config.json.
void write_moe_fields(const ModelConfig& c, nlohmann::json& j);
// Throws UsageError naming the field when the MoE sizes are inconsistent.
void validate_moe(const ModelConfig& c);

// Every parameter once, in floating point: sizes whose count would overflow int64 are caught
// before num_params() wraps (defined in param_count.cpp, beside the projections it walks).
double param_count(const ModelConfig& cfg);

}  // namespace shardtrain::model
