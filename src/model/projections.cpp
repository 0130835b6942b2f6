#include "shardtrain/model/projections.h"

#include "shardtrain/model/family.h"
#include "shardtrain/model/param_names.h"

namespace shardtrain::model {

namespace {
struct ProjInfo {
  const char* name;
  const char* module;
};
// Indexed by Proj.
constexpr ProjInfo kInfo[kNumProjections] = {
    {"q_proj", "self_attn.q_proj"},      {"k_proj", "self_attn.k_proj"},
    {"v_proj", "self_attn.v_proj"},      {"o_proj", "self_attn.o_proj"},
    {"gate_proj", "mlp.gate_proj"},      {"up_proj", "mlp.up_proj"},
    {"down_proj", "mlp.down_proj"},      {"qkv_proj", "self_attn.qkv_proj"},
    {"gate_up_proj", "mlp.gate_up_proj"}};
const ProjInfo& info(Proj p) { return kInfo[static_cast<int>(p)]; }
}  // namespace

const char* proj_name(Proj p) { return info(p).name; }
const char* proj_module(Proj p) { return info(p).module; }

std::optional<Proj> proj_by_name(const std::string& name) {
  for (int i = 0; i < kNumProjections; ++i)
    if (name == proj_name(static_cast<Proj>(i))) return static_cast<Proj>(i);
  return std::nullopt;
}

std::string proj_names_csv() {
  std::string s;
  for (int i = 0; i < kNumProjections; ++i) {
    if (!s.empty()) s += ",";
    s += proj_name(static_cast<Proj>(i));
  }
  return s;
}

const std::vector<Proj>& layer_projections(const ModelConfig& cfg) {
  static const std::vector<Proj> separate(kProjections.begin(), kProjections.end());
  static const std::vector<Proj> fused = {Proj::kQKV, Proj::kO, Proj::kGateUp, Proj::kDown};
  return family(cfg.model_type).fused_checkpoint ? fused : separate;
}

const std::vector<Proj>& layer_projections(const ModelConfig& cfg, int64_t layer) {
  static const std::vector<Proj> attention = {Proj::kQ, Proj::kK, Proj::kV, Proj::kO};
  return cfg.moe_layer(layer) ? attention : layer_projections(cfg);
}

Proj merged_proj(Merged m) { return m == Merged::kQKV ? Proj::kQKV : Proj::kGateUp; }

ProjShape proj_shape(const ModelConfig& c, Proj p) {
  const int64_t h = c.hidden_size;
  const int64_t q = c.num_heads * c.head_dim();
  const int64_t kv = c.num_kv_heads * c.head_dim();
  const int64_t f = c.intermediate_size;
  switch (p) {
    case Proj::kQ:
      return {q, h};
    case Proj::kK:
      return {kv, h};
    case Proj::kV:
      return {kv, h};
    case Proj::kO:
      return {h, q};
    case Proj::kGate:
      return {f, h};
    case Proj::kUp:
      return {f, h};
    case Proj::kDown:
      return {h, f};
    case Proj::kQKV:
      return {q + 2 * kv, h};
    case Proj::kGateUp:
      return {2 * f, h};
  }
  return {};
}

std::string proj_weight_name(int64_t layer, Proj p) {
  return names::layer(layer, proj_module(p)) + ".weight";
}
std::string proj_bias_name(int64_t layer, Proj p) {
  return names::layer(layer, proj_module(p)) + ".bias";
}

std::vector<Proj> merged_members(Merged m) {
  if (m == Merged::kQKV) return {Proj::kQ, Proj::kK, Proj::kV};
  return {Proj::kGate, Proj::kUp};
}

std::string merged_weight_name(int64_t layer, Merged m) {
  return proj_weight_name(layer, merged_proj(m));
}
std::string merged_bias_name(int64_t layer, Merged m) {
  return proj_bias_name(layer, merged_proj(m));
}

bool has_bias(const ModelConfig& c, Proj p) {
  const bool attention =
      p == Proj::kQ || p == Proj::kK || p == Proj::kV || p == Proj::kO || p == Proj::kQKV;
  switch (family(c.model_type).biases) {
    case Biases::kQkv:
      return attention && p != Proj::kO;
    case Biases::kNone:
      return false;
    case Biases::kAttention:
      return attention && c.attention_bias;
    case Biases::kFlags:
      break;
  }
  return attention ? c.attention_bias : c.mlp_bias;
}

}  // namespace shardtrain::model
