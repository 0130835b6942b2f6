#include "shardtrain/model/rotary.h"

#include <ATen/ATen.h>

#include "shardtrain/model/rope_scaling.h"

namespace shardtrain::model {

Rotary::Rotary(const ModelConfig& cfg, int64_t max_pos) {
  const int64_t d = cfg.head_dim();
  // Runs never pass max_position_embeddings (run_checks), where dynamic RoPE would change the base.
  auto inv_freq = rope_inv_freq(cfg.rope_scaling, cfg.rope_theta, d, cfg.max_position_embeddings,
                                max_pos);                    // [d/2]
  auto pos = at::arange(max_pos, at::kLong).to(at::kFloat);  // [T]
  auto freqs = at::outer(pos, inv_freq);                     // [T, d/2]
  auto emb = at::cat({freqs, freqs}, -1);                    // [T, d]
  cos = emb.cos();
  sin = emb.sin();
}

Rotary& Rotary::to(const at::Device& device, at::ScalarType dtype) {
  cos = cos.to(device, dtype);
  sin = sin.to(device, dtype);
  return *this;
}

}  // namespace shardtrain::model
