// The model families' small test configurations and one batch's logits through llama_forward, for
// the tests that compare a family's forward across devices, dtypes and float8 paths.
#pragma once
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/model/fp8.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/rotary.h"

namespace shardtrain::test {

inline model::ModelConfig family_config(const char* type, const nlohmann::json& extra) {
  nlohmann::json j = {
      {"model_type", type},       {"vocab_size", 256},      {"hidden_size", 128},
      {"intermediate_size", 256}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"head_dim", 32},         {"max_position_embeddings", 256},
      {"pad_token_id", 0}};
  j.update(extra);
  return model::model_from_hf_json(j, type);
}

// One configuration per family with what sets it apart switched on (shapes multiples of 16, as
// float8's GEMMs need).
inline std::vector<std::pair<std::string, model::ModelConfig>> family_cases() {
  return {
      {"qwen3", family_config("qwen3", {{"attention_bias", true}})},
      {"olmo2", family_config("olmo2", nlohmann::json::object())},
      {"gemma2", family_config("gemma2", {{"query_pre_attn_scalar", 24},
                                          {"sliding_window", 32},
                                          {"attn_logit_softcapping", 5.0},
                                          {"final_logit_softcapping", 3.0}})},
      {"gemma3", family_config("gemma3_text", {{"sliding_window", 32},
                                               {"sliding_window_pattern", 2},
                                               {"rope_local_base_freq", 100.0}})},
      {"phi4-mini", family_config("phi3", {{"partial_rotary_factor", 0.75},
                                           {"original_max_position_embeddings", 64},
                                           {"rope_scaling",
                                            {{"rope_type", "longrope"},
                                             {"short_factor", std::vector<double>(12, 1.5)},
                                             {"long_factor", std::vector<double>(12, 3.0)}}}})}};
}

// Logits of one batch (two rows, the second packed as two documents) on `device` in `dtype`,
// in fp32 on the CPU; the same weights at every call (the init's seed 3 plus seeded noise).
inline at::Tensor family_logits(const model::ModelConfig& m, const at::Device& device,
                                at::ScalarType dtype, bool fused,
                                model::Fp8Mode fp8 = model::Fp8Mode::kOff) {
  const auto store = model::ParamStore::initialize(m, 3);
  // Its own generator: every call, whatever the device, gets the same weights.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : store.named())
    w[name] = (t + 0.05 * at::randn(t.sizes(), gen, t.options())).to(device, dtype);
  // The fused path's merged views, as an FSDP unit lays them (Phi-3 holds them itself).
  for (int64_t l = 0; l < m.num_layers && fused; ++l)
    for (const model::Merged g : model::kMerged) {
      std::vector<at::Tensor> ws, bs;
      for (const model::Proj p : model::merged_members(g)) {
        if (w.count(model::proj_weight_name(l, p)))
          ws.push_back(w.at(model::proj_weight_name(l, p)));
        if (w.count(model::proj_bias_name(l, p))) bs.push_back(w.at(model::proj_bias_name(l, p)));
      }
      if (!ws.empty()) w[model::merged_weight_name(l, g)] = at::cat(ws);
      if (!bs.empty()) w[model::merged_bias_name(l, g)] = at::cat(bs);
    }
  const int64_t T = 96;
  model::Rotary rope(m, T);
  rope.to(device, dtype);
  const at::Tensor tokens = at::arange(2 * T, at::kLong).remainder(m.vocab_size).view({2, T});
  const at::Tensor positions = at::stack(
      {at::arange(T, at::kLong), at::cat({at::arange(60, at::kLong), at::arange(36, at::kLong)})});
  return model::llama_forward(
             m,
             [&](const std::string& n) {
               const auto it = w.find(n);
               if (it == w.end()) throw std::out_of_range("family_logits: no weight " + n);
               return it->second;
             },
             tokens.to(device), rope, dtype, nullptr, positions,
             model::LayerPath{false, fused, fp8})
      .to(at::kCPU, at::kFloat);
}

}  // namespace shardtrain::test
