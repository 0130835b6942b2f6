// RoPE scaling as config.json gives it (transformers 4's "rope_scaling" or transformers 5's
// "rope_parameters"), and the inverse frequencies it yields, as transformers' ROPE_INIT_FUNCTIONS
// compute them: "default", "linear" (positions interpolated by factor), "dynamic" (NTK-aware: the
// base grows once a sequence outgrows max_position_embeddings) and "llama3" (Llama-3.1's
// wavelength-dependent interpolation). Other kinds (yarn, longrope) are refused.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace shardtrain::model {

struct RopeScaling {
  std::string type = "default";                  // default, linear, dynamic or llama3
  double factor = 1.0;                           // linear, dynamic and llama3
  double low_freq_factor = 1.0;                  // llama3
  double high_freq_factor = 4.0;                 // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, longrope: the pre-training context
  // longrope (Phi-3): per-frequency divisors for rows up to, and past, the original context; and
  // cos/sin's scale (attention_factor; 0: from factor as transformers derives it).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 0;
  double partial_rotary_factor = 0;  // as the block gave it (0: not given); the config reads it
  bool scaled() const { return type != "default"; }
};
// longrope's scale of cos and sin: attention_factor, or sqrt(1 + ln(factor) / ln(original)) with
// factor = max_position_embeddings / original when not given; 1 for the other kinds.
double rope_attention_factor(const RopeScaling& r, int64_t max_position_embeddings);

// The block's rope_theta (if any) goes to *theta. Throws UsageError naming `origin`, the key and
// its value for a kind or a key shardtrain does not implement.
RopeScaling parse_rope_scaling(const nlohmann::json& block, const std::string& key,
                               const std::string& origin, double* theta);
// transformers 4's "rope_scaling" block for exports; null for default.
nlohmann::json rope_scaling_json(const RopeScaling& r);
// inv_freq [head_dim / 2] in fp32 for base theta, for a forward over seq_len positions (dynamic
// past max_position_embeddings, which runs never reach; longrope's long factors past its
// original context).
at::Tensor rope_inv_freq(const RopeScaling& r, double theta, int64_t head_dim,
                         int64_t max_position_embeddings, int64_t seq_len);

}  // namespace shardtrain::model
