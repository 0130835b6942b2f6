// Rotary position embedding's tables, computed once per run for every position it can reach.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "shardtrain/model/config.h"

namespace shardtrain::model {

// cos/sin tables in Hugging Face's rotate-half layout, computed in fp32.
struct Rotary {
  at::Tensor cos, sin;  // [max_pos, rotary_dim]: rotary_dim = head_dim but for Phi-4-mini
  // Gemma 3's sliding layers' tables (rope_local_theta, unscaled); undefined for other models.
  at::Tensor local_cos, local_sin;
  // longrope (Phi-3): the tables of batches reaching past long_after positions (cos and sin are
  // the short factors'); undefined for other RoPEs.
  at::Tensor long_cos, long_sin;
  int64_t long_after = 0;
  Rotary(const ModelConfig& cfg, int64_t max_pos);
  // The compute dtype: cast once here, not in every layer's forward (the same rounding).
  Rotary& to(const at::Device& device, at::ScalarType dtype = at::kFloat);
};

}  // namespace shardtrain::model
