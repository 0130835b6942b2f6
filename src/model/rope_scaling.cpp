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
  if (r.type != "default" && r.type != "linear" && r.type != "dynamic" && r.type != "llama3")
    throw runtime::UsageError(where + ".rope_type is " + r.type +
                              ", which shardtrain does not implement (it implements " +
                              "default, linear, dynamic and llama3)");
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
    } else if (k == "original_max_position_embeddings" && r.type == "llama3") {
      r.original_max_position_embeddings =
          static_cast<int64_t>(number("original_max_position_embeddings"));
    } else if (k == "partial_rotary_factor" && v.is_number() && v.get<double>() == 1.0) {
      continue;  // the whole head rotates, as here
    } else {
      throw runtime::UsageError(where + "." + k + " is " + v.dump() +
                                ", which shardtrain does not implement for rope_type " + r.type);
    }
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

nlohmann::json rope_scaling_json(const RopeScaling& r) {
  if (!r.scaled()) return nullptr;
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
