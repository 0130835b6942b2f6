#include "shardtrain/model/rope_scaling.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "shardtrain/runtime/error.h"

namespace shardtrain::model {

RopeScaling parse_rope_scaling(const nlohmann::json& block, const std::string& key,
                               const std::string& origin, double* theta) {
  RopeScaling r;
  if (block.is_null()) return r;
  const std::string where = "--model " + origin + ": " + key;
  if (!block.is_object()) throw runtime::UsageError(where + " must be an object or null");
  // transformers 4 wrote "type", later "rope_type".
  const char* type_key = block.contains("rope_type") ? "rope_type"
                         : block.contains("type")    ? "type"
                                                     : nullptr;
  if (type_key) {
    if (!block[type_key].is_string())
      throw runtime::UsageError(where + "." + type_key + " must be a string");
    r.type = block[type_key].get<std::string>();
  }
  if (r.type == "su") r.type = "longrope";  // Phi-3's first configs, as transformers renames it
  if (r.type != "default" && r.type != "linear" && r.type != "dynamic" && r.type != "llama3" &&
      r.type != "longrope")
    throw runtime::UsageError(where + ".rope_type is " + r.type +
                              ", which shardtrain does not implement (it implements " +
                              "default, linear, dynamic, llama3 and longrope)");
  auto factors = [&](const char* k) {
    std::vector<double> f;
    if (!block[k].is_array()) throw runtime::UsageError(where + "." + k + " must be a list");
    for (const auto& x : block[k]) {
      if (!x.is_number()) throw runtime::UsageError(where + "." + k + " must hold numbers");
      f.push_back(x.get<double>());
    }
    return f;
  };
  auto number = [&](const char* k) {
    if (!block[k].is_number())
      throw runtime::UsageError(where + "." + k + " must be a number, got " + block[k].dump());
    return block[k].get<double>();
  };
  for (const auto& [k, v] : block.items()) {
    if (k == "rope_type" || k == "type") continue;
    if (k == "rope_theta") {
      *theta = number("rope_theta");
    } else if (k == "factor" && r.type != "default") {
      r.factor = number("factor");
    } else if (k == "low_freq_factor" && r.type == "llama3") {
      r.low_freq_factor = number("low_freq_factor");
    } else if (k == "high_freq_factor" && r.type == "llama3") {
      r.high_freq_factor = number("high_freq_factor");
    } else if (k == "short_factor" && r.type == "longrope") {
      r.short_factor = factors("short_factor");
    } else if (k == "long_factor" && r.type == "longrope") {
      r.long_factor = factors("long_factor");
    } else if (k == "factor" && r.type == "longrope" && v.is_null()) {
      continue;  // derived from the contexts, as when absent
    } else if (k == "attention_factor" && r.type == "longrope") {
      if (!v.is_null()) r.attention_factor = number("attention_factor");
    } else if (k == "original_max_position_embeddings" &&
               (r.type == "llama3" || r.type == "longrope")) {
      r.original_max_position_embeddings =
          static_cast<int64_t>(number("original_max_position_embeddings"));
    } else if (k == "partial_rotary_factor") {
      r.partial_rotary_factor = number("partial_rotary_factor");  // the config decides (config.cpp)
    } else {
      throw runtime::UsageError(where + "." + k + " is " + v.dump() +
                                ", which shardtrain does not implement for rope_type " + r.type);
    }
  }
  if (r.type == "longrope") {
    r.factor = 0;  // set by the config from its contexts (config.cpp) unless given
    if (block.contains("factor") && block["factor"].is_number()) r.factor = number("factor");
    if (r.short_factor.empty() || r.long_factor.empty())
      throw runtime::UsageError(where + " (longrope) needs short_factor and long_factor");
    return r;
  }
  if (r.type != "default" && !block.contains("factor"))
    throw runtime::UsageError(where + " lacks factor");
  if (r.type != "default" && !(r.factor >= 1.0))
    throw runtime::UsageError(where + ".factor must be at least 1");
  if (r.type == "llama3") {
    for (const char* k :
         {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      if (!block.contains(k)) throw runtime::UsageError(where + " (llama3) lacks " + k);
    if (!(r.high_freq_factor > r.low_freq_factor) || r.original_max_position_embeddings <= 0)
      throw runtime::UsageError(where +
                                ": llama3 needs high_freq_factor > low_freq_factor and a positive "
                                "original_max_position_embeddings");
  }
  return r;
}

double rope_attention_factor(const RopeScaling& r, int64_t max_position_embeddings) {
  if (r.type != "longrope") return 1.0;
  if (r.attention_factor > 0) return r.attention_factor;
  const double original = static_cast<double>(r.original_max_position_embeddings);
  const double factor =
      r.factor > 0 ? r.factor : static_cast<double>(max_position_embeddings) / original;
  return factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(factor) / std::log(original));
}

nlohmann::json rope_scaling_json(const RopeScaling& r) {
  if (!r.scaled()) return nullptr;
  if (r.type == "longrope") {
    nlohmann::json j = {{"rope_type", "longrope"},
                        {"short_factor", r.short_factor},
                        {"long_factor", r.long_factor}};
    if (r.factor > 0) j["factor"] = r.factor;
    if (r.attention_factor > 0) j["attention_factor"] = r.attention_factor;
    return j;
  }
  nlohmann::json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  return j;
}

at::Tensor rope_inv_freq(const RopeScaling& r, double theta, int64_t head_dim,
                         int64_t max_position_embeddings, int64_t seq_len) {
  const int64_t d = head_dim;
  if (r.type == "dynamic") {
    // NTK-aware: a larger base once the sequence outgrows max_position_embeddings, the base itself
    // until then.
    const double seq = static_cast<double>(std::max(seq_len, max_position_embeddings));
    const double max_pos = static_cast<double>(max_position_embeddings);
    theta *= std::pow(r.factor * seq / max_pos - (r.factor - 1),
                      static_cast<double>(d) / static_cast<double>(d - 2));
  }
  // In fp32, as transformers: base ** (arange(0, d, 2).float() / d), then its reciprocal.
  at::Tensor inv_freq =
      1.0 / at::pow(theta, at::arange(0, d, 2, at::kLong).to(at::kFloat) / d);  // [d/2]
  if (r.type == "linear") return inv_freq / r.factor;
  if (r.type == "longrope") {
    // transformers: 1 / (ext_factors * base ** (arange(0, d, 2) / d)), long past the original.
    const auto& f = seq_len > r.original_max_position_embeddings ? r.long_factor : r.short_factor;
    if (static_cast<int64_t>(f.size()) != d / 2)
      throw runtime::UsageError("rope_scaling (longrope): short_factor and long_factor need " +
                                std::to_string(d / 2) + " values (the rotary dimension / 2), got " +
                                std::to_string(f.size()));
    const at::Tensor ext = at::tensor(std::vector<float>(f.begin(), f.end()), at::kFloat);
    const at::Tensor shape = at::arange(0, d, 2, at::kLong).to(at::kFloat) / d;
    return 1.0 / (ext * at::pow(theta, shape));
  }
  if (r.type != "llama3") return inv_freq;
  const double old_context = static_cast<double>(r.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / r.low_freq_factor;
  const double high_freq_wavelen = old_context / r.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv_freq;
  // Long wavelengths are divided by factor, short ones kept, the band between them interpolated.
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq);
  const at::Tensor smooth =
      (old_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
  const at::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return at::where(medium, smoothed, scaled);
}

}  // namespace shardtrain::model
