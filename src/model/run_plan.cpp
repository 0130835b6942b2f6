#include "shardtrain/model/run_plan.h"

#include <algorithm>

#include "shardtrain/model/family.h"
#include "shardtrain/model/lm_loss.h"
#include "shardtrain/model/norm_activation.h"
#include "shardtrain/model/projections.h"

namespace shardtrain::model {

void RunPlan::validate() const { adapters.validate(); }

std::unique_ptr<TrainedParams> RunPlan::trained(const ModelConfig& model) const {
  return adapters.enabled() ? lora_training(model, adapters) : full_training(model);
}

int64_t RunPlan::head_chunk(const ModelConfig& model, int64_t tokens) const {
  // Soft-capped logits (Gemma 2) take the unfused head: the chunked loss's hand-written gradient
  // has no cap in it.
  if (model.final_softcap > 0) return 0;
  return loss_chunk_tokens(tokens, model.vocab_size, model.hidden_size, loss_chunk);
}

void RunPlan::lay_out(UnitPass& p, const ModelConfig& model, const Rotary& rope,
                      const at::Tensor& tokens, const at::Tensor& positions,
                      const ContextShard* share, const ContextRing& ring, const at::Device& device,
                      at::ScalarType dtype) const {
  if (share) {
    p.layout = context_token_layout(rope, *share, ring, device);
    const at::Tensor& places = p.layout.context->places[share->rank];
    p.dropout_tokens.index = places.clamp_max(share->real_len - 1);
    p.dropout_tokens.row_tokens = share->real_len;
    p.layout.router_aux = p.router_aux;
    if (p.router_aux)  // the share's padding past the row routes but does not count
      p.router_aux->valid =
          places.lt(share->real_len).unsqueeze(0).expand({tokens.size(0), -1}).reshape({-1});
    return;
  }
  // The fused layers' rotary kernel reads packed rows' positions itself: no gathered tables.
  const bool gather = !(fused_layers && device.is_cuda()) || model.rotary_dim() != model.head_dim();
  // Soft-capped attention (Gemma 2) masks packed rows itself: no variable-length kernel.
  p.layout = token_layout(rope, positions, tokens.size(1), device, dtype, gather,
                          /*varlen=*/model.attn_softcap <= 0);
  p.layout.router_aux = p.router_aux;
}

at::Tensor RunPlan::unit(const ModelConfig& model, const UnitSpec& spec, const WeightLookup& base,
                         const WeightLookup* adapter_weights, const at::Tensor& x,
                         const UnitPass& p, at::ScalarType dtype, bool selective) const {
  LayerPath path;
  path.selective = selective;
  path.fused = fused_layers;
  path.fp8 = fp8;
  if (!adapter_weights || p.adapters_off)
    return unit_forward(model, spec, base, x, p.layout, dtype, nullptr, path);
  const LoraRun run{&adapters, *adapter_weights, p.row_seeds, p.train, p.dropout_tokens};
  return unit_forward(model, spec, base, x, p.layout, dtype, &run, path);
}

at::Tensor RunPlan::serve_experts(const ModelConfig& model, const UnitSpec& spec,
                                  const WeightLookup& base, const ExpertGroup& group,
                                  at::ScalarType dtype, const at::Device& device) const {
  if (spec.kind != UnitKind::kDecoderLayer || !model.moe_layer(spec.layer)) return {};
  return model::serve_experts(model, moe_weights(model, base, spec.layer, &group), group,
                              at::TensorOptions().dtype(dtype).device(device));
}

namespace {

// Under the fused layers, a merged group's members run as one float8 GEMM (one scale) where no
// adapter is on a member, and apart where one is; a pass with the adapters off (DPO's reference)
// merges them all the same. Such a weight has no one float8 form for every pass.
bool member_adapted(const RunPlan& plan) {
  if (!plan.fused_layers || !plan.adapters.enabled()) return false;
  for (const Merged m : kMerged)
    for (Proj p : merged_members(m))
      if (plan.adapters.targets_proj(p)) return true;
  return false;
}

// The float8 gather's scale group of each projection: the merged q k v and gate up share one
// under the fused layers, as the layer's merged GEMM scales them.
std::vector<int> scale_groups(const RunPlan& plan, int64_t layer,
                              const std::vector<FlatPiece>& pieces) {
  std::vector<int> group(pieces.size(), -1);
  for (size_t i = 0; i < pieces.size(); ++i)
    for (int k = 0; k < kNumProjections; ++k) {
      const Proj p = static_cast<Proj>(k);
      if (pieces[i].name != proj_weight_name(layer, p)) continue;
      group[i] = static_cast<int>(p);
      for (const Merged m : kMerged) {
        const auto members = merged_members(m);
        if (plan.fused_layers && std::find(members.begin(), members.end(), p) != members.end())
          group[i] = static_cast<int>(members.front());
      }
    }
  return group;
}

bool gathers_fp8(const RunPlan& plan, UnitKind kind) {
  return plan.fp8 == Fp8Mode::kTensorwise && plan.fp8_all_gather && !member_adapted(plan) &&
         kind == UnitKind::kDecoderLayer;
}

}  // namespace

std::unique_ptr<GatherCodec> RunPlan::gather_codec(const ModelConfig& model, const UnitSpec& spec,
                                                   std::vector<FlatPiece> pieces, int64_t padded,
                                                   int shard_size, int shard_rank,
                                                   at::ScalarType dtype) const {
  (void)model;
  if (!gathers_fp8(*this, spec.kind) || shard_size < 2) return nullptr;
  std::vector<int> groups = scale_groups(*this, spec.layer, pieces);
  // Group ids dense from 0 in first-use order.
  std::vector<int> dense(kNumProjections, -1);
  int next = 0;
  for (int& g : groups)
    if (g >= 0) g = dense[g] >= 0 ? dense[g] : (dense[g] = next++);
  return fp8_gather_codec(std::move(pieces), std::move(groups), padded, shard_size, shard_rank,
                          dtype);
}

double RunPlan::gathered_bytes(const ModelConfig& model, UnitKind kind, int64_t numel,
                               int64_t elt) const {
  const double all = static_cast<double>(numel * elt);
  if (!gathers_fp8(*this, kind)) return all;
  int64_t weights = 0;
  for (Proj p : layer_projections(model)) {
    const ProjShape shape = proj_shape(model, p);
    weights += shape.in * shape.out;
  }
  return all - static_cast<double>(weights * (elt - 1));
}

at::Tensor RunPlan::head_norm(const ModelConfig& model, const at::Tensor& x,
                              const at::Tensor& weight) const {
  return rms_norm(x, weight, model.rms_norm_eps, fused_layers,
                  family(model.model_type).norm_weight);
}

}  // namespace shardtrain::model
