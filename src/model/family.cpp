#include "shardtrain/model/family.h"

#include <stdexcept>

namespace shardtrain::model {

const std::vector<Family>& families() {
  // From transformers' configuration_<family>.py and modeling_<family>.py (5.x).
  static const std::vector<Family> f = [] {
    Family llama{"llama", "LlamaForCausalLM"};
    Family mistral{"mistral", "MistralForCausalLM"};
    mistral.biases = Biases::kNone;
    mistral.sliding = Sliding::kAll;
    Family qwen2{"qwen2", "Qwen2ForCausalLM"};
    qwen2.biases = Biases::kQkv;
    qwen2.sliding = Sliding::kLayerTypes;
    qwen2.default_rms_norm_eps = 1e-6;
    Family qwen3{"qwen3", "Qwen3ForCausalLM"};
    qwen3.qk_norm = QkNorm::kPerHead;
    qwen3.biases = Biases::kAttention;
    qwen3.sliding = Sliding::kLayerTypes;
    qwen3.default_head_dim = 128;
    qwen3.default_rms_norm_eps = 1e-6;
    Family olmo2{"olmo2", "Olmo2ForCausalLM"};
    olmo2.norms = NormPlacement::kPost;
    olmo2.qk_norm = QkNorm::kWhole;
    olmo2.norm_weight = NormWeight::kBeforeCast;
    olmo2.biases = Biases::kAttention;
    olmo2.default_pad_token_id = 1;
    Family gemma2{"gemma2", "Gemma2ForCausalLM"};
    gemma2.norms = NormPlacement::kSandwich;
    gemma2.norm_weight = NormWeight::kUnitOffset;
    gemma2.biases = Biases::kAttention;
    gemma2.sliding = Sliding::kPattern;
    gemma2.default_pattern = 2;
    gemma2.default_head_dim = 256;
    gemma2.default_rms_norm_eps = 1e-6;
    gemma2.default_pad_token_id = 0;
    gemma2.embed_scale = true;
    gemma2.activation_key = "hidden_activation";
    gemma2.default_activation = "gelu_pytorch_tanh";
    gemma2.gemma_attention = true;
    gemma2.default_query_pre_attn_scalar = 256;
    gemma2.default_attn_softcap = 50;
    gemma2.default_final_softcap = 30;
    Family gemma3 = gemma2;  // Gemma3ForCausalLM: the text model
    gemma3.model_type = "gemma3_text";
    gemma3.architecture = "Gemma3ForCausalLM";
    gemma3.qk_norm = QkNorm::kPerHead;
    gemma3.default_pattern = 6;
    gemma3.default_attn_softcap = 0;
    gemma3.default_final_softcap = 0;
    gemma3.local_rope = true;
    Family phi3{"phi3", "Phi3ForCausalLM"};  // Phi-3, Phi-3.5, Phi-4-mini
    phi3.biases = Biases::kNone;
    phi3.sliding = Sliding::kAll;
    phi3.default_pad_token_id = 32000;
    phi3.fused_checkpoint = true;
    Family mixtral = mistral;
    mixtral.model_type = "mixtral";
    mixtral.architecture = "MixtralForCausalLM";
    mixtral.moe_block = "block_sparse_moe";
    mixtral.expert_gate = "w1";
    mixtral.expert_up = "w3";
    mixtral.expert_down = "w2";
    Family qwen3_moe = qwen3;
    qwen3_moe.model_type = "qwen3_moe";
    qwen3_moe.architecture = "Qwen3MoeForCausalLM";
    qwen3_moe.sliding = Sliding::kFlagged;
    qwen3_moe.default_head_dim = 0;  // Qwen3MoeConfig has none: hidden / heads when absent
    qwen3_moe.moe_block = "mlp";
    qwen3_moe.moe_norm_topk = true;
    qwen3_moe.moe_layer_fields = true;
    qwen3_moe.default_experts = 128;
    qwen3_moe.default_experts_per_token = 8;
    qwen3_moe.routing_in_dtype = true;
    // OLMoE: Llama's layer with OLMo's q/k norms over the whole projection; every layer sparse.
    Family olmoe{"olmoe", "OlmoeForCausalLM"};
    olmoe.qk_norm = QkNorm::kWhole;
    olmoe.biases = Biases::kAttention;
    olmoe.default_pad_token_id = 1;
    olmoe.moe_block = "mlp";
    olmoe.moe_norm_topk = true;
    olmoe.default_experts = 64;
    olmoe.default_experts_per_token = 8;
    olmoe.default_aux_coef = 0.01;
    olmoe.routing_in_dtype = true;
    return std::vector<Family>{llama,  mistral, qwen2,   qwen3,     olmo2, gemma2,
                               gemma3, phi3,    mixtral, qwen3_moe, olmoe};
  }();
  return f;
}

const Family& family(const std::string& model_type) {
  for (const Family& f : families())
    if (model_type == f.model_type) return f;
  throw std::out_of_range("no model family " + model_type);
}

std::string family_names() {
  std::string s;
  for (const Family& f : families()) s += (s.empty() ? "" : ", ") + std::string(f.model_type);
  return s;
}

}  // namespace shardtrain::model
