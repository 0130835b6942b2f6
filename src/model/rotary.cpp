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
  const int64_t d = cfg.rotary_dim();
  const RopeScaling& r = cfg.rope_scaling;
  const double scale = rope_attention_factor(r, cfg.max_position_embeddings);  // longrope's
  // Runs never pass max_position_embeddings (run_checks), where dynamic RoPE would change the base;
  // longrope's short factors serve batches within the original context.
  const int64_t seq = r.type == "longrope" ? r.original_max_position_embeddings : max_pos;
  std::tie(cos, sin) =
      tables(rope_inv_freq(r, cfg.rope_theta, d, cfg.max_position_embeddings, seq), max_pos);
  if (r.type == "longrope") {
    std::tie(long_cos, long_sin) =
        tables(rope_inv_freq(r, cfg.rope_theta, d, cfg.max_position_embeddings, seq + 1), max_pos);
    long_after = r.original_max_position_embeddings;
  }
  if (scale != 1.0)  // transformers scales cos and sin themselves
    for (at::Tensor* t : {&cos, &sin, &long_cos, &long_sin})
      if (t->defined()) *t = *t * scale;
  if (cfg.rope_local_theta > 0)
    std::tie(local_cos, local_sin) = tables(
        rope_inv_freq(RopeScaling{}, cfg.rope_local_theta, d, cfg.max_position_embeddings, max_pos),
        max_pos);
}

Rotary& Rotary::to(const at::Device& device, at::ScalarType dtype) {
  cos = cos.to(device, dtype);
  sin = sin.to(device, dtype);
  for (at::Tensor* t : {&local_cos, &local_sin, &long_cos, &long_sin})
    if (t->defined()) *t = t->to(device, dtype);
  return *this;
}

}  // namespace shardtrain::model
