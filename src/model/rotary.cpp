#include "shardtrain/model/rotary.h"

#include <ATen/ATen.h>

#include <tuple>
#include <utility>

#include "shardtrain/model/rope_scaling.h"

namespace shardtrain::model {

namespace {
// [max_pos, d] cos and sin of the positions times inv_freq [d/2], in rotate-half layout.
std::pair<at::Tensor, at::Tensor> tables(const at::Tensor& inv_freq, int64_t max_pos) {
  auto pos = at::arange(max_pos, at::kLong).to(at::kFloat);  // [T]
  auto freqs = at::outer(pos, inv_freq);                     // [T, d/2]
  auto emb = at::cat({freqs, freqs}, -1);                    // [T, d]
  return {emb.cos(), emb.sin()};
}
}  // namespace

Rotary::Rotary(const ModelConfig& cfg, int64_t max_pos) {
  const int64_t d = cfg.head_dim();
  // Runs never pass max_position_embeddings (run_checks), where dynamic RoPE would change the base.
  std::tie(cos, sin) = tables(
      rope_inv_freq(cfg.rope_scaling, cfg.rope_theta, d, cfg.max_position_embeddings, max_pos),
      max_pos);
  if (cfg.rope_local_theta > 0)
    std::tie(local_cos, local_sin) = tables(
        rope_inv_freq(RopeScaling{}, cfg.rope_local_theta, d, cfg.max_position_embeddings, max_pos),
        max_pos);
}

Rotary& Rotary::to(const at::Device& device, at::ScalarType dtype) {
  cos = cos.to(device, dtype);
  sin = sin.to(device, dtype);
  if (local_cos.defined()) {
    local_cos = local_cos.to(device, dtype);
    local_sin = local_sin.to(device, dtype);
  }
  return *this;
}

}  // namespace shardtrain::model
