// A decoder layer's seven linear projections, named once: their Hugging Face module names, their
// weight shapes and the order in which everything that walks them (parameter specs, weight
// loading, adapter targets, export, memory accounting) takes them.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shardtrain/model/config.h"

namespace shardtrain::model {

// Projections that read the same input, computed as one matmul in the fused layer path.
enum class Merged { kQKV, kGateUp };

// kQKV and kGateUp: Phi-3's checkpoint projections (q k v and gate up stored as one weight each);
// the same names serve the other families' merged views (Merged).
enum class Proj { kQ, kK, kV, kO, kGate, kUp, kDown, kQKV, kGateUp };
inline constexpr int kNumProjections = 9;
// Hugging Face's order inside a layer: attention (q k v o), then the MLP (gate up down).
inline constexpr std::array<Proj, 7> kProjections = {Proj::kQ,    Proj::kK,  Proj::kV,   Proj::kO,
                                                     Proj::kGate, Proj::kUp, Proj::kDown};
// The projections a layer of this model has as parameters: kProjections, or Phi-3's
// qkv_proj, o_proj, gate_up_proj, down_proj (family.h's fused_checkpoint).
const std::vector<Proj>& layer_projections(const ModelConfig& cfg);
// Layer `layer`'s: a sparse layer (mixture of experts, model/moe.h) has the attention's alone, its
// MLP being a router and experts.
const std::vector<Proj>& layer_projections(const ModelConfig& cfg, int64_t layer);

// "q_proj": the name PEFT's target_modules (and our adapter targets) use.
const char* proj_name(Proj p);
// "self_attn.q_proj": the module inside "model.layers.<i>.".
const char* proj_module(Proj p);
// The projection whose proj_name() is `name`; empty for any other string.
std::optional<Proj> proj_by_name(const std::string& name);
// "q_proj,k_proj,...": every name, for messages that list the choices.
std::string proj_names_csv();
// The projection of Merged m's name (kQKV, kGateUp).
Proj merged_proj(Merged m);

struct ProjShape {
  int64_t out = 0, in = 0;  // the weight is [out, in]; x [.., in] -> [.., out]
};
ProjShape proj_shape(const ModelConfig& cfg, Proj p);
// "model.layers.<i>.self_attn.q_proj.weight"
std::string proj_weight_name(int64_t layer, Proj p);
// Whether transformers builds the projection with a bias, by the family's Biases (family.h).
bool has_bias(const ModelConfig& cfg, Proj p);
// "model.layers.<i>.self_attn.q_proj.bias": [out]
std::string proj_bias_name(int64_t layer, Proj p);

// Projections that read the same input, computed as one matmul in the fused layer path (FSDP
// units lay their weights, and their biases, side by side for it): q k v, and gate up.
inline constexpr std::array<Merged, 2> kMerged = {Merged::kQKV, Merged::kGateUp};
std::vector<Proj> merged_members(Merged m);  // in kProjections' order
// shardtrain's own names for the merged views ("model.layers.<i>.self_attn.qkv_proj.weight");
// never read from or written to a file.
std::string merged_weight_name(int64_t layer, Merged m);
std::string merged_bias_name(int64_t layer, Merged m);

}  // namespace shardtrain::model
