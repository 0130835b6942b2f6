// A mixture-of-experts config.json's fields: how many experts, how many each token takes, their
// width, which layers are sparse.
#include "shardtrain/model/config.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "shardtrain/model/family.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/text.h"

namespace shardtrain::model {

bool ModelConfig::moe_layer(int64_t layer) const {
  if (num_experts <= 0) return false;
  // Qwen3MoeDecoderLayer: not in mlp_only_layers, and every decoder_sparse_step-th layer.
  return std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) ==
             mlp_only_layers.end() &&
         (layer + 1) % decoder_sparse_step == 0;
}

namespace {

// config.json's key as a T (bool, int64_t or double), the fallback when absent or null.
template <class T>
T field(const nlohmann::json& j, const char* key, T fallback, const std::string& origin) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const nlohmann::json& v = j[key];
  const char* want = std::is_same_v<T, bool> ? "true or false"
                     : std::is_integral_v<T> ? "an integer"
                                             : "a number";
  const bool ok = std::is_same_v<T, bool> ? v.is_boolean()
                  : std::is_integral_v<T> ? v.is_number_integer()
                                          : v.is_number();
  if (!ok) throw runtime::UsageError("--model " + origin + ": \"" + key + "\" must be " + want);
  return v.get<T>();
}

}  // namespace

void read_moe_fields(const nlohmann::json& j, const std::string& origin, ModelConfig& c) {
  const Family& fam = family(c.model_type);
  if (!fam.moe_block) return;
  // transformers 5 saves num_local_experts; Qwen3's and OLMoE's own releases say num_experts.
  c.num_experts =
      field<int64_t>(j, "num_local_experts",
                     field<int64_t>(j, "num_experts", fam.default_experts, origin), origin);
  c.experts_per_token =
      field<int64_t>(j, "num_experts_per_tok", fam.default_experts_per_token, origin);
  c.router_aux_loss_coef = field<double>(j, "router_aux_loss_coef", fam.default_aux_coef, origin);
  c.output_router_logits = field<bool>(j, "output_router_logits", false, origin);
  if (const double jitter = field<double>(j, "router_jitter_noise", 0.0, origin); jitter != 0)
    throw runtime::UsageError("--model " + origin + ": router_jitter_noise is " +
                              runtime::round_trip(jitter) +
                              ", which shardtrain does not implement (no noise on the router's "
                              "input); use 0");
  // Mixtral always renormalises; Qwen3MoeConfig and OlmoeConfig default to not.
  c.norm_topk_prob = fam.moe_norm_topk ? field<bool>(j, "norm_topk_prob", false, origin) : true;
  c.expert_intermediate_size = c.intermediate_size;  // Mixtral's and OLMoE's experts
  if (!fam.moe_layer_fields) return;
  c.expert_intermediate_size = field<int64_t>(j, "moe_intermediate_size", 768, origin);
  c.decoder_sparse_step = field<int64_t>(j, "decoder_sparse_step", 1, origin);
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array())
      throw runtime::UsageError("--model " + origin + ": \"mlp_only_layers\" must be a list");
    for (const auto& l : j["mlp_only_layers"]) {
      if (!l.is_number_integer())
        throw runtime::UsageError("--model " + origin +
                                  ": \"mlp_only_layers\" must hold layer indices");
      c.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
}

void write_moe_fields(const ModelConfig& c, nlohmann::json& j) {
  const Family& fam = family(c.model_type);
  if (!fam.moe_block) return;
  j["num_local_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  j["output_router_logits"] = c.output_router_logits;
  if (fam.moe_norm_topk) j["norm_topk_prob"] = c.norm_topk_prob;
  if (!fam.moe_norm_topk) j["router_jitter_noise"] = 0.0;
  if (!fam.moe_layer_fields) return;
  j["moe_intermediate_size"] = c.expert_intermediate_size;
  j["decoder_sparse_step"] = c.decoder_sparse_step;
  j["mlp_only_layers"] = c.mlp_only_layers;
}

void validate_moe(const ModelConfig& c) {
  if (!family(c.model_type).moe_block) return;
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw runtime::UsageError(c.name + ": " + what);
  };
  require(c.num_experts > 0, "num_local_experts (num_experts) must be positive");
  require(c.experts_per_token > 0 && c.experts_per_token <= c.num_experts,
          "num_experts_per_tok must be between 1 and num_local_experts (" +
              std::to_string(c.num_experts) + "), got " + std::to_string(c.experts_per_token));
  require(c.expert_intermediate_size > 0, "moe_intermediate_size must be positive");
  require(c.decoder_sparse_step > 0, "decoder_sparse_step must be positive");
}

}  // namespace shardtrain::model
