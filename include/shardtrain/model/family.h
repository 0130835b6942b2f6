// What sets each model family transformers builds from config.json's model_type apart from
// Llama's decoder, in one table: where the layer's norms sit, how q and k are normalised, how
// RMSNorm rounds, which projections carry biases, which layers slide, and the defaults of the
// family's config class for fields a config.json may leave out.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain::model {

// Where a decoder layer's RMSNorms sit around its two blocks (attention, MLP).
enum class NormPlacement {
  kPre,       // Llama: input_layernorm before attention, post_attention_layernorm before the MLP
  kPost,      // OLMo 2: post_attention_layernorm after attention, post_feedforward_layernorm
              // after the MLP, nothing before either
  kSandwich,  // Gemma 2 and 3: input_ and pre_feedforward_layernorm before, post_attention_ and
              // post_feedforward_layernorm after
};

// RMSNorm on the queries and keys before RoPE.
enum class QkNorm {
  kNone,
  kPerHead,  // Qwen3, Gemma 3: over each head's head_dim ([head_dim] weights)
  kWhole,    // OLMo 2: over the whole projection ([heads * head_dim] weights)
};

// How RMSNorm applies its weight to the fp32 normalised x.
enum class NormWeight {
  kAfterCast,   // Llama: weight * x.to(dtype)
  kBeforeCast,  // OLMo 2: (weight * x).to(dtype)
  kUnitOffset,  // Gemma: (x * (1 + weight)).to(dtype); the weights start at 0
};

// Which projections transformers builds with a bias.
enum class Biases {
  kFlags,      // attention_bias (q k v o) and mlp_bias (gate up down): Llama
  kAttention,  // attention_bias (q k v o) only: Qwen3, OLMo 2, Gemma
  kQkv,        // q k v always, nothing else: Qwen2
  kNone,       // Mistral
};

// Which layers attend through config.json's sliding_window.
enum class Sliding {
  kNone,        // no sliding_window field (Llama, OLMo 2)
  kAll,         // every layer when sliding_window is set (Mistral)
  kLayerTypes,  // with use_sliding_window, layer_types' sliding_attention layers (by default from
                // max_window_layers on): Qwen2, Qwen3
  kPattern,     // layer_types' sliding_attention layers; by default every layer but each
                // sliding_window_pattern-th (Gemma 2: 2, Gemma 3: 6)
  kFlagged,     // every layer, with use_sliding_window (Qwen3-MoE)
};

struct Family {
  const char* model_type;    // config.json's model_type
  const char* architecture;  // config.json's architectures[0] on export
  NormPlacement norms = NormPlacement::kPre;
  QkNorm qk_norm = QkNorm::kNone;
  NormWeight norm_weight = NormWeight::kAfterCast;
  Biases biases = Biases::kFlags;
  Sliding sliding = Sliding::kNone;
  int64_t default_head_dim = 0;  // the config class's head_dim when absent (0: hidden / heads)
  double default_rms_norm_eps = 1e-5;
  int64_t default_pad_token_id = -1;  // the config class's pad_token_id (-1: None)
  int64_t default_pattern = 0;        // Sliding::kPattern: every n-th layer is global
  bool embed_scale = false;           // Gemma: embeddings times sqrt(hidden_size), rounded to dtype
  const char* activation_key = "hidden_act";  // Gemma: hidden_activation
  const char* default_activation = "silu";
  // Gemma: reads query_pre_attn_scalar and the soft-caps, which default as below when absent.
  bool gemma_attention = false;
  double default_query_pre_attn_scalar = 0;
  double default_attn_softcap = 0;
  double default_final_softcap = 0;
  bool local_rope = false;  // Gemma 3: sliding layers take rope_local_base_freq, unscaled
  // Phi-3: q k v and gate up are one checkpoint tensor each (qkv_proj, gate_up_proj).
  bool fused_checkpoint = false;
  // Mixture of experts (Mixtral, Qwen3-MoE): the module holding a sparse layer's router ("gate")
  // and experts; nullptr: every layer dense.
  const char* moe_block = nullptr;
  const char* expert_gate = "gate_proj";  // an expert's projections (Mixtral: w1, w3, w2)
  const char* expert_up = "up_proj";
  const char* expert_down = "down_proj";
  bool moe_norm_topk = false;     // norm_topk_prob read (Qwen3-MoE, OLMoE; Mixtral always)
  bool moe_layer_fields = false;  // Qwen3-MoE: moe_intermediate_size, decoder_sparse_step,
                                  // mlp_only_layers (elsewhere every layer, intermediate_size)
  int64_t default_experts = 8, default_experts_per_token = 2;  // the config class's defaults
  double default_aux_coef = 0.001;
  // Qwen3-MoE rounds the routing weights to the compute dtype before they scale the experts'
  // outputs; Mixtral scales in fp32 and rounds the product.
  bool routing_in_dtype = false;
};

// The families shardtrain implements, in the order messages list them.
const std::vector<Family>& families();
// The family of model_type; throws std::out_of_range for another (config.cpp refuses those first).
const Family& family(const std::string& model_type);
// "llama, mistral, qwen2, ...": for messages.
std::string family_names();

}  // namespace shardtrain::model
