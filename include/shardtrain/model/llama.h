// Llama-2 forward pass, written as functions of the weights so that the FSDP engine can hand
// each unit's parameters over just in time (all-gathered) and take them back afterwards.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>

#include "shardtrain/model/config.h"
#include "shardtrain/model/params.h"

namespace shardtrain {

struct LayerWeights {
  at::Tensor q_proj, k_proj, v_proj, o_proj;  // [H, H], [KV, H], [KV, H], [H, H]
  at::Tensor gate_proj, up_proj, down_proj;   // [F, H], [F, H], [H, F]
  at::Tensor input_norm, post_norm;           // [H]
};
struct HeadWeights {
  at::Tensor norm;     // [H]
  at::Tensor lm_head;  // [V, H]
};

// Forward asks for weights unit by unit, in order.
class WeightProvider {
 public:
  virtual ~WeightProvider() = default;
  virtual at::Tensor embedding() = 0;  // [V, H]
  virtual LayerWeights layer(int64_t i) = 0;
  virtual HeadWeights head() = 0;
};

// Single-rank provider: the fp32 master parameters, cast to the compute dtype (autograd
// carries gradients back to the fp32 leaves).
class LocalWeights : public WeightProvider {
 public:
  LocalWeights(const ParamStore& params, at::ScalarType compute_dtype);
  at::Tensor embedding() override;
  LayerWeights layer(int64_t i) override;
  HeadWeights head() override;

 private:
  at::Tensor w(const std::string& name) const;
  const ParamStore& params_;
  at::ScalarType dtype_;
};

// cos/sin tables in Hugging Face's rotate-half layout, fp32.
struct Rotary {
  at::Tensor cos, sin;  // [max_pos, head_dim]
  Rotary(const ModelConfig& cfg, int64_t max_pos);
};

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// x: [B, T, H] -> [B, T, H]
at::Tensor decoder_layer(const ModelConfig& cfg, const LayerWeights& w, const at::Tensor& x,
                         const at::Tensor& cos, const at::Tensor& sin);
// tokens: [B, T] int64 -> logits [B, T, V] in the compute dtype.
at::Tensor llama_forward(const ModelConfig& cfg, WeightProvider& weights, const at::Tensor& tokens,
                         const Rotary& rope, at::ScalarType compute_dtype);

// Sum of token cross-entropies (fp32) over positions whose next-token label is not -100, and
// their count: labels[:, 1:] against logits[:, :-1], Hugging Face's shift.
struct LossSum {
  at::Tensor sum;     // scalar fp32, differentiable
  int64_t count = 0;  // tokens that contributed
};
LossSum causal_lm_loss(const at::Tensor& logits, const at::Tensor& labels);
int64_t count_loss_tokens(const at::Tensor& labels);

}  // namespace shardtrain
