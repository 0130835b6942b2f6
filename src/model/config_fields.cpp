#include "shardtrain/model/config_fields.h"

#include <nlohmann/json.hpp>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {
namespace {

// A checked field's accepted value: absent and null are always accepted (transformers' default).
struct Accepted {
  const char* name;
  nlohmann::json value;
  const char* why;  // what the refusal says shardtrain implements instead
};

const std::vector<Accepted>& accepted_values() {
  static const std::vector<Accepted> a = {
      {"attention_dropout", 0, "attention has no dropout here"},
      {"use_bidirectional_attention", false, "causal attention"},
      {"resid_pdrop", 0, "the residual stream has no dropout here"},
      {"clip_qkv", nullptr, "q, k and v are not clamped here"},
      {"embd_pdrop", 0, "the embeddings have no dropout here"},
  };
  return a;
}

std::string shown(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> f = {
      {"vocab_size", FieldUse::kRead, "embedding and lm_head rows"},
      {"hidden_size", FieldUse::kRead, "the model width"},
      {"intermediate_size", FieldUse::kRead, "the MLP width"},
      {"num_hidden_layers", FieldUse::kRead, "decoder layers"},
      {"num_attention_heads", FieldUse::kRead, "query heads"},
      {"num_key_value_heads", FieldUse::kRead,
       "key/value heads (grouped-query attention when fewer)"},
      {"head_dim", FieldUse::kRead,
       "the width of each head (default hidden_size / num_attention_heads)"},
      {"max_position_embeddings", FieldUse::kRead,
       "the longest sequence, and the rotary table's length"},
      {"rms_norm_eps", FieldUse::kRead, "RMSNorm's epsilon"},
      {"rope_theta", FieldUse::kRead, "RoPE's base"},
      {"rope_parameters", FieldUse::kRead,
       "transformers 5's RoPE block: rope_theta and rope_scaling's keys"},
      {"rope_scaling", FieldUse::kRead,
       "rope_type default, linear (factor), dynamic (factor), llama3 (factor, "
       "low/high_freq_factor, original_max_position_embeddings) or longrope (short_factor, "
       "long_factor, factor, attention_factor); others refused"},
      {"initializer_range", FieldUse::kRead,
       "the std of the seeded init of a run without --weights", false},
      {"torch_dtype", FieldUse::kRead, "the dtype the weights are stored in (exports keep it)",
       false},
      {"dtype", FieldUse::kRead, "transformers 5's name for torch_dtype", false},
      {"model_type", FieldUse::kRead,
       "llama, mistral, qwen2, qwen3, olmo2, gemma2, gemma3_text, phi3, mixtral, qwen3_moe or "
       "olmoe "
       "(others refused): "
       "which of the switches below apply"},
      {"attention_bias", FieldUse::kRead,
       "llama, qwen3, qwen3_moe, olmo2, olmoe, gemma2, gemma3_text: biases on q, k, v and o (qwen2 "
       "always has q, k and v biases; mistral, mixtral and phi3 none)"},
      {"mlp_bias", FieldUse::kRead, "llama: biases on gate, up and down"},
      {"sliding_window", FieldUse::kRead,
       "mistral, mixtral, phi3: each query attends to this many positions (itself included); "
       "qwen2, qwen3: with use_sliding_window, in layer_types' sliding layers; qwen3_moe: with "
       "use_sliding_window, every layer; gemma: in the sliding layers"},
      {"use_sliding_window", FieldUse::kRead,
       "qwen2, qwen3: the sliding window applies (to the layers layer_types marks); qwen3_moe: "
       "to every layer"},
      {"max_window_layers", FieldUse::kRead,
       "qwen2, qwen3: layers from this index on slide, unless layer_types says otherwise"},
      {"layer_types", FieldUse::kRead,
       "qwen2, qwen3, gemma2, gemma3_text: full_attention or sliding_attention per layer"},
      {"sliding_window_pattern", FieldUse::kRead,
       "gemma2, gemma3_text: without layer_types, every n-th layer is global (2 and 6)"},
      {"_sliding_window_pattern", FieldUse::kHarmless,
       "gemma3_text: transformers' own copy; layer_types decides"},
      {"hidden_act", FieldUse::kRead,
       "the MLP's activation: silu (swish), gelu, gelu_pytorch_tanh or relu (gemma reads "
       "hidden_activation instead and ignores it)"},
      {"hidden_activation", FieldUse::kRead, "gemma2, gemma3_text: the MLP's activation"},
      {"query_pre_attn_scalar", FieldUse::kRead,
       "gemma2, gemma3_text: attention scores scale by its inverse square root"},
      {"attn_logit_softcapping", FieldUse::kRead,
       "gemma2: attention scores capped at cap * tanh(s / cap) (the eager path; null: none)"},
      {"final_logit_softcapping", FieldUse::kRead,
       "gemma2: logits capped at cap * tanh(x / cap) (the unfused head; null: none)"},
      {"rope_local_base_freq", FieldUse::kRead,
       "gemma3_text: the sliding layers' RoPE base (unscaled)"},
      {"use_bidirectional_attention", FieldUse::kChecked, "false only"},
      {"partial_rotary_factor", FieldUse::kRead,
       "phi3 (Phi-4-mini): RoPE turns this fraction of each head (1 elsewhere; others refused)"},
      {"original_max_position_embeddings", FieldUse::kRead,
       "phi3: longrope's pre-training context (long factors past it)"},
      {"num_local_experts", FieldUse::kRead,
       "mixtral, qwen3_moe, olmoe: experts in each sparse layer (num_experts: the same)"},
      {"num_experts", FieldUse::kRead,
       "qwen3_moe, olmoe: their releases' name for num_local_experts"},
      {"num_experts_per_tok", FieldUse::kRead,
       "mixtral, qwen3_moe, olmoe: the experts each token goes to (top-k of the router's "
       "softmax)"},
      {"moe_intermediate_size", FieldUse::kRead,
       "qwen3_moe: each expert's width (mixtral's and olmoe's experts take intermediate_size)"},
      {"norm_topk_prob", FieldUse::kRead,
       "qwen3_moe, olmoe: the top-k routing weights renormalised to sum 1 (mixtral always)"},
      {"decoder_sparse_step", FieldUse::kRead,
       "qwen3_moe: layers l with (l + 1) % step == 0 are sparse"},
      {"mlp_only_layers", FieldUse::kRead, "qwen3_moe: layers kept dense"},
      {"output_router_logits", FieldUse::kRead,
       "true: training adds router_aux_loss_coef times the load-balancing loss (aux_loss)"},
      {"router_aux_loss_coef", FieldUse::kRead,
       "the load-balancing loss's weight, with output_router_logits"},
      {"router_jitter_noise", FieldUse::kChecked, "0 only"},
      {"clip_qkv", FieldUse::kChecked, "olmoe: null only (q, k and v are not clamped here)"},
      {"resid_pdrop", FieldUse::kChecked, "0 only"},
      {"embd_pdrop", FieldUse::kChecked, "0 only"},
      {"cache_implementation", FieldUse::kHarmless, "inference's key/value cache"},
      {"attention_dropout", FieldUse::kChecked, "0 only"},
      {"tie_word_embeddings", FieldUse::kRead,
       "lm_head is the embedding matrix: one parameter, both gradients summed"},
      {"quantization_config", FieldUse::kChecked,
       "refused: quantized weights are not trained here"},
      {"pretraining_tp", FieldUse::kHarmless,
       "Meta's tensor-parallel split of the same matmuls: equal math"},
      {"architectures", FieldUse::kHarmless,
       "the class name; the weights' names are checked on load"},
      {"bos_token_id", FieldUse::kHarmless, "generation's tokens; training takes the tokenizer's"},
      {"eos_token_id", FieldUse::kHarmless, "generation's tokens; training takes the tokenizer's"},
      {"pad_token_id", FieldUse::kRead,
       "the embedding's padding_idx (negative: from the end): its row gets no gradient from the "
       "lookup (a tied head's still does); padding is masked out of the loss by its labels"},
      {"use_cache", FieldUse::kHarmless, "inference's key/value cache"},
      {"transformers_version", FieldUse::kHarmless, "the writer's version"},
      {"_name_or_path", FieldUse::kHarmless, "where the writer loaded it from"},
      {"id2label", FieldUse::kHarmless, "classification heads' labels"},
      {"label2id", FieldUse::kHarmless, "classification heads' labels"},
      {"problem_type", FieldUse::kHarmless, "classification heads' loss"},
      {"is_encoder_decoder", FieldUse::kHarmless, "false for every decoder-only model"},
      {"chunk_size_feed_forward", FieldUse::kHarmless, "chunks the MLP over positions: equal math"},
      {"output_attentions", FieldUse::kHarmless, "what a forward returns"},
      {"output_hidden_states", FieldUse::kHarmless, "what a forward returns"},
      {"return_dict", FieldUse::kHarmless, "what a forward returns"},
      {"torchscript", FieldUse::kHarmless, "export mode"},
      {"tokenizer_class", FieldUse::kHarmless, "the tokenizer comes from --tokenizer"},
  };
  return f;
}

std::vector<std::string> check_config_fields(const nlohmann::json& j, const std::string& origin) {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items()) {
    const ConfigField* field = nullptr;
    for (const ConfigField& f : config_fields())
      if (key == f.name) field = &f;
    if (!field) {
      unknown.push_back(key);
      continue;
    }
    if (key == "quantization_config" && !value.is_null())
      throw runtime::UsageError(
          "--model " + origin +
          ": quantization_config is set (quantized weights); give the model in "
          "float32, bfloat16 or float16");
    for (const Accepted& a : accepted_values()) {
      if (key != a.name || value.is_null()) continue;
      // 0 and 0.0 are the same dropout: compare numbers as numbers.
      const bool same = value.is_number() && a.value.is_number()
                            ? value.get<double>() == a.value.get<double>()
                            : value == a.value;
      if (!same)
        throw runtime::UsageError("--model " + origin + ": " + key + " is " + shown(value) +
                                  ", which shardtrain does not " + "implement (" + a.why +
                                  "); use a model without it");
    }
  }
  return unknown;
}

std::vector<std::string> changed_fields(const nlohmann::json& saved, const nlohmann::json& now) {
  std::vector<std::string> out;
  // Another family: its fields that the other lacks are named by model_type alone.
  const bool family = saved.value("model_type", "") != now.value("model_type", "");
  auto value = [](const nlohmann::json& j, const std::string& key) {
    return j.contains(key) ? j.at(key) : nlohmann::json();
  };
  auto consider = [&](const std::string& key) {
    for (const ConfigField& f : config_fields())
      if (key == f.name && (f.use == FieldUse::kHarmless || !f.after_init)) return;
    const nlohmann::json a = value(saved, key), b = value(now, key);
    const bool same = a.is_number() && b.is_number() ? a.get<double>() == b.get<double>() : a == b;
    if (!same) out.push_back(key + " " + shown(a) + " -> " + shown(b));
  };
  for (const auto& [key, v] : saved.items())
    if (now.contains(key) || !family) consider(key);
  for (const auto& [key, v] : now.items())
    if (!saved.contains(key) && !family) consider(key);
  return out;
}

}  // namespace shardtrain::model
