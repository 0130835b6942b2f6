// Hugging Face's parameter names for the embedding, the norms and the head, and the prefix of a
// layer's (its projections are named in projections.h); and how weights are looked up by them.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>

namespace shardtrain::model {

struct ModelConfig;

// A weight by full Hugging Face name, already in the compute dtype.
using WeightLookup = std::function<at::Tensor(const std::string& name)>;

namespace names {
inline constexpr const char* kEmbed = "model.embed_tokens.weight";
inline constexpr const char* kNorm = "model.norm.weight";
inline constexpr const char* kLmHead = "lm_head.weight";
// A layer's norms, inside "model.layers.<i>."; its projections are named in projections.h.
inline constexpr const char* kInputNorm = "input_layernorm.weight";
inline constexpr const char* kPostNorm = "post_attention_layernorm.weight";
inline constexpr const char* kPreFfnNorm = "pre_feedforward_layernorm.weight";    // Gemma
inline constexpr const char* kPostFfnNorm = "post_feedforward_layernorm.weight";  // OLMo 2, Gemma
inline constexpr const char* kQNorm = "self_attn.q_norm.weight";  // Qwen3, OLMo 2, Gemma 3
inline constexpr const char* kKNorm = "self_attn.k_norm.weight";
std::string layer(int64_t i, const char* local);  // "model.layers.<i>.<local>"
// The head's matrix: lm_head.weight, or with tie_word_embeddings the embedding's.
const char* lm_head(const ModelConfig& cfg);
}  // namespace names

}  // namespace shardtrain::model
