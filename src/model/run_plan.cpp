#include "shardtrain/model/run_plan.h"

#include "shardtrain/model/lm_loss.h"
#include "shardtrain/model/norm_activation.h"

namespace shardtrain::model {

void RunPlan::validate() const { lora.validate(); }

std::unique_ptr<TrainedParams> RunPlan::trained(const ModelConfig& model) const {
  return lora.enabled() ? lora_training(model, lora) : full_training(model);
}

int64_t RunPlan::head_chunk(const ModelConfig& model, int64_t tokens) const {
  return loss_chunk_tokens(tokens, model.vocab_size, model.hidden_size, loss_chunk);
}

void RunPlan::lay_out(UnitPass& p, const Rotary& rope, const at::Tensor& tokens,
                      const at::Tensor& positions, const ContextShard* share,
                      const ContextRing& ring, const at::Device& device,
                      at::ScalarType dtype) const {
  if (share) {
    p.layout = context_token_layout(rope, *share, ring, device);
    const at::Tensor& places = p.layout.context->places[share->rank];
    p.dropout_tokens.index = places.clamp_max(share->real_len - 1);
    p.dropout_tokens.row_tokens = share->real_len;
    return;
  }
  // The fused layers' rotary kernel reads packed rows' positions itself: no gathered tables.
  const bool gather = !(fused_layers && device.is_cuda());
  p.layout = token_layout(rope, positions, tokens.size(1), device, dtype, gather);
}

at::Tensor RunPlan::unit(const ModelConfig& model, const UnitSpec& spec, const WeightLookup& base,
                         const WeightLookup* adapters, const at::Tensor& x, const UnitPass& p,
                         at::ScalarType dtype, bool selective) const {
  LayerPath path;
  path.selective = selective;
  path.fused = fused_layers;
  path.fp8 = fp8;
  if (!adapters || p.adapters_off)
    return unit_forward(model, spec, base, x, p.layout, dtype, nullptr, path);
  const LoraRun run{&lora, *adapters, p.row_seeds, p.train, p.dropout_tokens};
  return unit_forward(model, spec, base, x, p.layout, dtype, &run, path);
}

at::Tensor RunPlan::head_norm(const ModelConfig& model, const at::Tensor& x,
                              const at::Tensor& weight) const {
  return rms_norm(x, weight, model.rms_norm_eps, fused_layers);
}

}  // namespace shardtrain::model
