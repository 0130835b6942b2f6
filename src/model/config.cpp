#include "shardtrain/model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "shardtrain/model/config_fields.h"
#include "shardtrain/model/family.h"
#include "shardtrain/runtime/error.h"
#include "shardtrain/runtime/text.h"

namespace shardtrain::model {
namespace fs = std::filesystem;
namespace {

ModelConfig make(const std::string& name, int64_t vocab, int64_t hidden, int64_t inter,
                 int64_t layers, int64_t heads, int64_t kv, int64_t max_pos) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv;
  c.max_position_embeddings = max_pos;
  return c;
}

ModelConfig llama3(const std::string& name, int64_t hidden, int64_t inter, int64_t layers,
                   int64_t heads, double factor, bool tied) {
  ModelConfig c = make(name, 128256, hidden, inter, layers, heads, 8, 131072);
  c.rope_theta = 500000.0;
  c.rope_scaling = {"llama3", factor, 1.0, 4.0, 8192};
  c.tie_word_embeddings = tied;
  return c;
}

const std::map<std::string, ModelConfig>& presets() {
  // Shapes from the published config.json files on the Hugging Face Hub: meta-llama/Llama-2-*-hf,
  // meta-llama/Llama-3.1-*, meta-llama/Llama-3.2-*, mistralai/Mistral-7B-v0.3, Qwen/Qwen2.5-7B and
  // those named below.
  static const std::map<std::string, ModelConfig> p = [] {
    std::map<std::string, ModelConfig> m = {
        {"tiny", make("tiny", 512, 64, 176, 2, 4, 2, 512)},
        {"small", make("small", 4096, 256, 688, 4, 8, 4, 1024)},
        {"llama2-7b", make("llama2-7b", 32000, 4096, 11008, 32, 32, 32, 4096)},
        {"llama2-13b", make("llama2-13b", 32000, 5120, 13824, 40, 40, 40, 4096)},
        {"llama2-70b", make("llama2-70b", 32000, 8192, 28672, 80, 64, 8, 4096)},
        {"llama3.1-8b", llama3("llama3.1-8b", 4096, 14336, 32, 32, 8.0, false)},
        {"llama3.1-70b", llama3("llama3.1-70b", 8192, 28672, 80, 64, 8.0, false)},
        {"llama3.1-405b", llama3("llama3.1-405b", 16384, 53248, 126, 128, 8.0, false)},
        {"llama3.2-1b", llama3("llama3.2-1b", 2048, 8192, 16, 32, 32.0, true)},
        {"llama3.2-3b", llama3("llama3.2-3b", 3072, 8192, 28, 24, 32.0, true)},
    };
    ModelConfig mistral = make("mistral-7b", 32768, 4096, 14336, 32, 32, 8, 32768);
    mistral.model_type = "mistral";
    mistral.rope_theta = 1e6;
    m["mistral-7b"] = mistral;
    ModelConfig qwen = make("qwen2.5-7b", 152064, 3584, 18944, 28, 28, 4, 32768);
    qwen.model_type = "qwen2";
    qwen.rope_theta = 1e6;
    qwen.rms_norm_eps = 1e-6;
    qwen.max_window_layers = 28;
    m["qwen2.5-7b"] = qwen;
    // Qwen/Qwen3-8B and allenai/OLMo-2-1124-7B.
    ModelConfig qwen3 = make("qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 40960);
    qwen3.model_type = "qwen3";
    qwen3.explicit_head_dim = 128;
    qwen3.rope_theta = 1e6;
    qwen3.rms_norm_eps = 1e-6;
    qwen3.max_window_layers = 36;
    m["qwen3-8b"] = qwen3;
    ModelConfig olmo2 = make("olmo2-7b", 100352, 4096, 11008, 32, 32, 32, 4096);
    olmo2.model_type = "olmo2";
    olmo2.rope_theta = 500000.0;
    olmo2.rms_norm_eps = 1e-6;
    m["olmo2-7b"] = olmo2;
    // google/gemma-3-12b-it's text model.
    ModelConfig gemma3 = make("gemma3-12b", 262208, 3840, 15360, 48, 16, 8, 131072);
    gemma3.model_type = "gemma3_text";
    gemma3.explicit_head_dim = 256;
    gemma3.hidden_act = "gelu_pytorch_tanh";
    gemma3.rms_norm_eps = 1e-6;
    gemma3.rope_theta = 1e6;
    gemma3.rope_scaling = {"linear", 8.0};
    gemma3.rope_local_theta = 10000.0;
    gemma3.query_pre_attn_scalar = 256;
    gemma3.sliding_window = 1024;
    for (int64_t i = 0; i < gemma3.num_layers; ++i)
      gemma3.sliding_layers.push_back((i + 1) % 6 != 0);
    gemma3.tie_word_embeddings = true;
    gemma3.pad_token_id = 0;
    m["gemma3-12b"] = gemma3;
    // microsoft/Phi-4-mini-instruct's shapes (its longrope factors left out: RoPE's table does not
    // change a plan).
    ModelConfig phi4 = make("phi4-mini", 200064, 3072, 8192, 32, 24, 8, 131072);
    phi4.model_type = "phi3";
    phi4.partial_rotary_factor = 0.75;
    phi4.tie_word_embeddings = true;
    phi4.pad_token_id = 199999;
    m["phi4-mini"] = phi4;
    // mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: mixtures of
    // experts (model/moe.h).
    ModelConfig mixtral = make("mixtral-8x7b", 32000, 4096, 14336, 32, 32, 8, 32768);
    mixtral.model_type = "mixtral";
    mixtral.rope_theta = 1e6;
    mixtral.num_experts = 8;
    mixtral.experts_per_token = 2;
    mixtral.expert_intermediate_size = 14336;
    m["mixtral-8x7b"] = mixtral;
    for (const auto& [name, hidden, dense, layers, heads, expert] :
         std::vector<std::tuple<const char*, int64_t, int64_t, int64_t, int64_t, int64_t>>{
             {"qwen3-30b-a3b", 2048, 6144, 48, 32, 768},
             {"qwen3-235b-a22b", 4096, 12288, 94, 64, 1536}}) {
      ModelConfig q = make(name, 151936, hidden, dense, layers, heads, 4, 40960);
      q.model_type = "qwen3_moe";
      q.explicit_head_dim = 128;
      q.rope_theta = 1e6;
      q.rms_norm_eps = 1e-6;
      q.num_experts = 128;
      q.experts_per_token = 8;
      q.expert_intermediate_size = expert;
      q.norm_topk_prob = true;
      m[name] = q;
    }
    return m;
  }();
  return p;
}

void require(bool ok, const std::string& msg) {
  if (!ok) throw runtime::UsageError(msg);
}

// Checked as soon as config.json names the family: another family's fields are not to be judged.
void require_family(const std::string& name, const std::string& model_type) {
  require(std::find(model_types().begin(), model_types().end(), model_type) != model_types().end(),
          name + ": model_type is " + model_type +
              ", which shardtrain does not implement (it implements " + family_names() + ")");
}

}  // namespace

void ModelConfig::validate() const {
  auto pos = [&](int64_t v, const char* opt, const char* key) {
    require(v > 0, std::string(opt) + " (" + key + ") must be positive, got " + std::to_string(v));
  };
  pos(vocab_size, "--vocab-size", "vocab_size");
  pos(hidden_size, "--hidden-size", "hidden_size");
  pos(intermediate_size, "--intermediate-size", "intermediate_size");
  pos(num_layers, "--n-layers", "num_hidden_layers");
  pos(num_heads, "--n-heads", "num_attention_heads");
  pos(num_kv_heads, "--n-kv-heads", "num_key_value_heads");
  pos(max_position_embeddings, "--max-seq-len", "max_position_embeddings");
  require_family(name, model_type);
  require(explicit_head_dim >= 0, name + ": head_dim must be positive");
  require(explicit_head_dim > 0 || hidden_size % num_heads == 0,
          "--n-heads (num_attention_heads) = " + std::to_string(num_heads) +
              " does not divide --hidden-size (hidden_size) = " + std::to_string(hidden_size) +
              "; pick a head count that divides the width, or give head_dim");
  require(num_heads % num_kv_heads == 0,
          "--n-heads (num_attention_heads) = " + std::to_string(num_heads) +
              " is not a multiple of --n-kv-heads (num_key_value_heads) = " +
              std::to_string(num_kv_heads) + "; pick n_kv_heads dividing n_heads");
  require(partial_rotary_factor > 0 && partial_rotary_factor <= 1 && rotary_dim() % 2 == 0,
          name + ": partial_rotary_factor must give an even number of rotary dimensions");
  require(head_dim() % 2 == 0,
          "the head dimension (head_dim, or --hidden-size / --n-heads) must be even for rotary "
          "embeddings, got " +
              std::to_string(head_dim()));
  require(sliding_window >= 0, name + ": sliding_window must be positive or null");
  require(pad_token_id >= -1 && pad_token_id < vocab_size,
          name + ": pad_token_id " + std::to_string(pad_token_id) + " is outside the vocabulary (" +
              std::to_string(vocab_size) + " tokens)");
  require(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == num_layers,
          name + ": layer_types must name one kind per layer (num_hidden_layers)");
  validate_moe(*this);
  require(rms_norm_eps > 0, "rms_norm_eps must be positive");
  require(rope_theta > 0, "rope_theta must be positive");
  require(initializer_range > 0, "initializer_range must be positive");
  bool known_act = false;
  std::string acts;
  for (const auto& a : hidden_acts()) {
    known_act = known_act || a == hidden_act;
    acts += (acts.empty() ? "" : ", ") + a;
  }
  require(known_act, name + ": hidden_act is " + hidden_act +
                         ", which shardtrain does not implement (it implements " + acts + ")");
  // num_params() in floating point first: sizes whose count overflows int64 are no model anyone
  // trains.
  const double params = param_count(*this);
  if (params > std::ldexp(1.0, 50)) {
    char n[32];
    std::snprintf(n, sizeof n, "%.3g", params);
    throw runtime::UsageError(std::string("these sizes give ") + n +
                              " parameters, over the 2^50 this build supports; check "
                              "--hidden-size, --n-layers, --vocab-size and --intermediate-size");
  }
}

int64_t ModelConfig::num_matmul_params() const {
  return num_params() - num_embedding_params() + (tie_word_embeddings ? num_embedding_params() : 0);
}

int64_t ModelConfig::attention_window(int64_t layer) const {
  return sliding_window > 0 && sliding_layer(layer) ? sliding_window : 0;
}

int64_t ModelConfig::rotary_dim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor);
}

bool ModelConfig::sliding_layer(int64_t layer) const {
  return sliding_layers.empty() ? sliding_window > 0 : sliding_layers[static_cast<size_t>(layer)];
}

double ModelConfig::query_scale() const {
  // Folded into q: (q s) k^T / sqrt(D) = q k^T / sqrt(query_pre_attn_scalar), s = sqrt(D / qpas).
  if (query_pre_attn_scalar <= 0 || query_pre_attn_scalar == static_cast<double>(head_dim()))
    return 1.0;
  return std::sqrt(static_cast<double>(head_dim()) / query_pre_attn_scalar);
}

const std::vector<std::string>& model_types() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> v;
    for (const Family& f : families()) v.push_back(f.model_type);
    return v;
  }();
  return t;
}

const std::vector<std::string>& hidden_acts() {
  static const std::vector<std::string> a = {"silu", "swish", "gelu", "gelu_pytorch_tanh", "relu"};
  return a;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& kv : presets()) names.push_back(kv.first);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::ostringstream os;
    os << "--model: unknown preset '" << name << "'; choose one of";
    for (const auto& n : model_preset_names()) os << " " << n;
    os << ", or give a Hugging Face config.json";
    throw runtime::UsageError(os.str());
  }
  return it->second;
}

namespace {

// config.json's layer_types into c.sliding_layers; false when it has none.
bool read_layer_types(const nlohmann::json& j, const std::string& origin, ModelConfig& c) {
  if (!j.contains("layer_types") || j["layer_types"].is_null()) return false;
  if (!j["layer_types"].is_array())
    throw runtime::UsageError("--model " + origin + ": \"layer_types\" must be a list");
  for (const auto& t : j["layer_types"]) {
    if (t != "full_attention" && t != "sliding_attention")
      throw runtime::UsageError(
          "--model " + origin + ": layer_types holds " + t.dump() +
          ", which shardtrain does not implement (full_attention or sliding_attention)");
    c.sliding_layers.push_back(t == "sliding_attention");
  }
  return true;
}

// Gemma 3's two RoPEs: transformers 5 nests them in rope_parameters by layer type; transformers 4
// gave rope_theta, rope_scaling (the full layers') and rope_local_base_freq. The sliding layers'
// is unscaled.
void read_local_rope(const nlohmann::json& j, const std::string& origin, ModelConfig& c) {
  if (!j.contains("rope_theta") || j["rope_theta"].is_null())
    c.rope_theta = 1e6;  // Gemma3TextConfig.default_theta["global"]
  c.rope_local_theta = 10000.0;
  const nlohmann::json* nested = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      (j["rope_parameters"].contains("full_attention") ||
       j["rope_parameters"].contains("sliding_attention")))
    nested = &j["rope_parameters"];
  if (nested) {
    for (const auto& [k, v] : nested->items())
      if (k != "full_attention" && k != "sliding_attention")
        throw runtime::UsageError("--model " + origin + ": rope_parameters." + k +
                                  " is not a layer type (full_attention or sliding_attention)");
    if (nested->contains("full_attention"))
      c.rope_scaling = parse_rope_scaling((*nested)["full_attention"],
                                          "rope_parameters.full_attention", origin, &c.rope_theta);
    if (nested->contains("sliding_attention") &&
        parse_rope_scaling((*nested)["sliding_attention"], "rope_parameters.sliding_attention",
                           origin, &c.rope_local_theta)
            .scaled())
      throw runtime::UsageError("--model " + origin +
                                ": rope_parameters.sliding_attention is scaled, which "
                                "shardtrain does not implement (Gemma 3 scales the full layers)");
    return;
  }
  if (j.contains("rope_local_base_freq") && j["rope_local_base_freq"].is_number())
    c.rope_local_theta = j["rope_local_base_freq"].get<double>();
}

// What sets the families apart, read as each family's config class reads it (model/family.h):
// biases, tied embeddings, the sliding window and which layers use it.
template <class Get, class Flag>
void read_family_fields(const nlohmann::json& j, const std::string& origin, ModelConfig& c, Get get,
                        Flag flag) {
  const Family& fam = family(c.model_type);
  c.tie_word_embeddings = flag(j, "tie_word_embeddings");
  if (fam.biases == Biases::kFlags || fam.biases == Biases::kAttention)
    c.attention_bias = flag(j, "attention_bias");
  if (fam.biases == Biases::kFlags) c.mlp_bias = flag(j, "mlp_bias");
  if (fam.sliding == Sliding::kAll) c.sliding_window = get("sliding_window", int64_t{0}, false);
  if (fam.gemma_attention) {
    c.query_pre_attn_scalar = static_cast<double>(get(
        "query_pre_attn_scalar", static_cast<int64_t>(fam.default_query_pre_attn_scalar), false));
    // Absent: the config class's default; null: no cap.
    auto cap = [&](const char* key, double fallback) {
      if (!j.contains(key)) return fallback;
      return j[key].is_null() ? 0.0 : get(key, 0.0, false);
    };
    c.attn_softcap = cap("attn_logit_softcapping", fam.default_attn_softcap);
    c.final_softcap = cap("final_logit_softcapping", fam.default_final_softcap);
  }
  if (fam.sliding == Sliding::kPattern) {
    // Gemma: layer_types, by default every layer sliding but each n-th (sliding_window_pattern).
    if (!j.contains("sliding_window") || !j["sliding_window"].is_null())
      c.sliding_window = get("sliding_window", int64_t{4096}, false);
    const int64_t pattern = get("sliding_window_pattern", fam.default_pattern, false);
    if (pattern <= 0)
      throw runtime::UsageError("--model " + origin + ": sliding_window_pattern must be positive");
    if (!read_layer_types(j, origin, c))
      for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers.push_back((i + 1) % pattern != 0);
    return;
  }
  if (fam.sliding == Sliding::kFlagged && flag(j, "use_sliding_window"))
    c.sliding_window = get("sliding_window", int64_t{4096}, false);
  if (fam.sliding != Sliding::kLayerTypes) return;
  // Qwen2Config, Qwen3Config: the window applies only with use_sliding_window, to the layers
  // layer_types marks "sliding_attention" (by default those from max_window_layers on).
  c.max_window_layers = get("max_window_layers", int64_t{28}, false);
  if (flag(j, "use_sliding_window")) c.sliding_window = get("sliding_window", int64_t{4096}, false);
  if (!read_layer_types(j, origin, c) && c.sliding_window > 0)
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers.push_back(i >= c.max_window_layers);
}

}  // namespace

ModelConfig model_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object())
    throw runtime::UsageError("--model " + origin + ": config.json is a JSON " + j.type_name() +
                              ", not an object");
  auto get = [&](const char* key, auto fallback, bool required) {
    using T = decltype(fallback);
    if (!j.contains(key) || j[key].is_null()) {
      if (required)
        throw runtime::UsageError("--model " + origin + ": config.json lacks \"" + key + "\"");
      return fallback;
    }
    const auto& v = j[key];
    if (!v.is_number())
      throw runtime::UsageError("--model " + origin + ": \"" + key + "\" has the wrong type");
    if constexpr (std::is_integral_v<T>) {
      // A float is taken only when it is a whole number in range: 1e300 has no int64 value.
      if (v.is_number_float()) {
        const double d = v.get<double>();
        if (!(d == std::floor(d) && std::fabs(d) <= 9.0e18))
          throw runtime::UsageError("--model " + origin + ": \"" + key +
                                    "\" must be an integer, got " + v.dump());
        return static_cast<T>(d);
      }
    }
    return v.get<T>();
  };
  // Optional fields read with a type check: nlohmann's value() throws its own error on a wrong
  // type.
  auto flag = [&](const nlohmann::json& obj, const char* key) {
    if (!obj.contains(key) || obj[key].is_null()) return false;
    if (!obj[key].is_boolean())
      throw runtime::UsageError("--model " + origin + ": \"" + key + "\" must be true or false");
    return obj[key].get<bool>();
  };
  ModelConfig c;
  c.name = origin;
  if (j.contains("model_type") && !j["model_type"].is_null()) {
    if (!j["model_type"].is_string())
      throw runtime::UsageError("--model " + origin +
                                ": \"model_type\" must be a string such as \"llama\"");
    c.model_type = j["model_type"].get<std::string>();
    require_family(origin, c.model_type);
  }
  const Family& fam = family(c.model_type);
  c.vocab_size = get("vocab_size", int64_t{32000}, true);
  c.hidden_size = get("hidden_size", int64_t{0}, true);
  c.intermediate_size = get("intermediate_size", int64_t{0}, true);
  c.num_layers = get("num_hidden_layers", int64_t{0}, true);
  c.num_heads = get("num_attention_heads", int64_t{0}, true);
  c.num_kv_heads = get("num_key_value_heads", c.num_heads, false);
  c.max_position_embeddings = get("max_position_embeddings", int64_t{4096}, false);
  c.rms_norm_eps = get("rms_norm_eps", fam.default_rms_norm_eps, false);
  c.rope_theta = get("rope_theta", 10000.0, false);
  // transformers 4: "rope_scaling": {"rope_type": "llama3", ...}; transformers 5 nests all of it,
  // the base included: "rope_parameters": {"rope_theta": ..., "rope_type": "default" | "llama3",
  // ...}.
  if (fam.local_rope) read_local_rope(j, origin, c);
  double partial = 0;  // partial_rotary_factor, top-level or in the RoPE block
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null())
    partial = get("partial_rotary_factor", 1.0, false);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (fam.local_rope && std::string(key) == "rope_parameters" &&
        j[key].contains("full_attention"))
      continue;  // read_local_rope's
    const RopeScaling r = parse_rope_scaling(j[key], key, origin, &c.rope_theta);
    if (r.partial_rotary_factor > 0) partial = r.partial_rotary_factor;
    if (r.scaled() || !c.rope_scaling.scaled()) c.rope_scaling = r;
  }
  if (partial > 0 && partial != 1.0) {
    if (!fam.fused_checkpoint)  // Phi3Config's alone among the families
      throw runtime::UsageError("--model " + origin + ": partial_rotary_factor is " +
                                runtime::round_trip(partial) + ", which shardtrain does not " +
                                "implement for " + c.model_type + " (the whole head rotates)");
    c.partial_rotary_factor = partial;
  }
  if (c.rope_scaling.type == "longrope") {
    // Phi3Config: the pre-training context at the top level when the RoPE block lacks it.
    if (c.rope_scaling.original_max_position_embeddings <= 0)
      c.rope_scaling.original_max_position_embeddings =
          get("original_max_position_embeddings", int64_t{0}, false);
    if (c.rope_scaling.original_max_position_embeddings <= 0)
      throw runtime::UsageError("--model " + origin +
                                ": longrope needs original_max_position_embeddings");
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!j.contains(key) || j[key].is_null() || !c.torch_dtype.empty()) continue;
    if (!j[key].is_string())
      throw runtime::UsageError("--model " + origin + ": \"" + key +
                                "\" must be a string such as \"bfloat16\"");
    c.torch_dtype = j[key].get<std::string>();
  }
  c.explicit_head_dim = get("head_dim", fam.default_head_dim, false);
  read_family_fields(j, origin, c, get, flag);
  read_moe_fields(j, origin, c);
  c.initializer_range = get("initializer_range", 0.02, false);
  c.hidden_act = fam.default_activation;
  if (j.contains(fam.activation_key) && !j[fam.activation_key].is_null()) {
    if (!j[fam.activation_key].is_string())
      throw runtime::UsageError("--model " + origin + ": \"" + fam.activation_key +
                                "\" must be a string such as \"silu\"");
    c.hidden_act = j[fam.activation_key].get<std::string>();
  }
  c.pad_token_id = fam.default_pad_token_id;
  if (j.contains("pad_token_id") && j["pad_token_id"].is_null()) c.pad_token_id = -1;
  if (j.contains("pad_token_id") && !j["pad_token_id"].is_null()) {
    const int64_t id = get("pad_token_id", int64_t{0}, true);
    c.pad_token_id = id < 0 ? id + c.vocab_size : id;  // nn.Embedding counts back from the end
  }
  nlohmann::json ids = nlohmann::json::object();  // kept for exports: generation reads them
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (j.contains(key)) ids[key] = j[key];
  if (!ids.empty()) c.special_token_ids = ids.dump();
  c.unknown_fields =
      check_config_fields(j, origin);  // refuses what is set to math shardtrain does not implement
  return c;
}

std::string describe_shape(const ModelConfig& c) {
  return "vocab " + std::to_string(c.vocab_size) + ", hidden " + std::to_string(c.hidden_size) +
         ", intermediate " + std::to_string(c.intermediate_size) + ", " +
         std::to_string(c.num_layers) + " layers, " + std::to_string(c.num_heads) + " heads, " +
         std::to_string(c.num_kv_heads) + " kv heads";
}

bool same_shape(const ModelConfig& a, const ModelConfig& b) {
  return a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_layers == b.num_layers &&
         a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads;
}

nlohmann::json model_to_hf_json(const ModelConfig& c) {
  const Family& fam = family(c.model_type);
  nlohmann::json j = {{"architectures", {fam.architecture}},
                      {"model_type", c.model_type},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_hidden_layers", c.num_layers},
                      {"num_attention_heads", c.num_heads},
                      {"num_key_value_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim()},
                      {"max_position_embeddings", c.max_position_embeddings},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"rope_scaling", rope_scaling_json(c.rope_scaling)},
                      {"initializer_range", c.initializer_range},
                      {fam.activation_key, c.hidden_act},
                      {"attention_dropout", 0.0},
                      {"tie_word_embeddings", c.tie_word_embeddings},
                      {"bos_token_id", 1},
                      {"eos_token_id", 2},
                      {"torch_dtype", "float32"}};
  if (!c.special_token_ids.empty()) j.update(nlohmann::json::parse(c.special_token_ids));
  if (fam.biases == Biases::kFlags || fam.biases == Biases::kAttention)
    j["attention_bias"] = c.attention_bias;
  if (fam.biases == Biases::kFlags) j["mlp_bias"] = c.mlp_bias;
  const nlohmann::json window =
      c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  if (fam.sliding == Sliding::kAll) j["sliding_window"] = window;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < c.num_layers; ++i)
    types.push_back(c.sliding_layer(i) ? "sliding_attention" : "full_attention");
  if (fam.sliding == Sliding::kLayerTypes) {
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = window;
    j["max_window_layers"] = c.max_window_layers;
    j["layer_types"] = types;
  }
  if (fam.sliding == Sliding::kPattern) {
    j["sliding_window"] = window;
    j["layer_types"] = types;
  }
  if (fam.sliding == Sliding::kFlagged) {
    j["use_sliding_window"] = c.sliding_window > 0;
    j["sliding_window"] = window;
  }
  const auto cap = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  if (fam.gemma_attention) {
    j["query_pre_attn_scalar"] = static_cast<int64_t>(c.query_pre_attn_scalar);  // an int there
    j["attn_logit_softcapping"] = cap(c.attn_softcap);
    j["final_logit_softcapping"] = cap(c.final_softcap);
  }
  if (fam.local_rope) j["rope_local_base_freq"] = c.rope_local_theta;
  write_moe_fields(c, j);
  if (fam.fused_checkpoint) {
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    if (c.rope_scaling.type == "longrope")
      j["original_max_position_embeddings"] = c.rope_scaling.original_max_position_embeddings;
  }
  return j;
}

ModelConfig resolve_model(const std::string& spec) {
  const bool looks_like_path = spec.find('/') != std::string::npos ||
                               (spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".json") == 0);
  std::error_code
      ec;  // the non-throwing forms: a name too long for the OS is an error of the option
  if (!looks_like_path && !fs::exists(spec, ec)) return model_preset(spec);
  fs::path p(spec);
  if (fs::is_directory(p, ec)) p /= "config.json";
  std::ifstream in(p);
  if (!in)
    throw runtime::UsageError("--model: cannot open " + p.string() + " (" +
                              (ec ? ec.message() : "no such file") + ")");
  nlohmann::json j;
  try {
    in >> j;  // from the stream: a device or FIFO named by mistake fails at its first bad byte
  } catch (const nlohmann::json::exception& e) {
    throw runtime::UsageError("--model " + p.string() + ": invalid JSON: " + e.what());
  }
  return model_from_hf_json(j, p.string());
}

ModelConfig model_from_hf_text(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw runtime::UsageError("--model " + origin + ": invalid JSON: " + e.what());
  }
  return model_from_hf_json(j, origin);
}

}  // namespace shardtrain::model
