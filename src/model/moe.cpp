#include "shardtrain/model/moe.h"

#include <ATen/ATen.h>

#if defined(SHARDTRAIN_TORCH_CUDA) && defined(SHARDTRAIN_HAVE_CUDA)
#include "shardtrain/cuda/cuda_handles.h"
#endif
#include "shardtrain/model/family.h"
#include "shardtrain/model/norm_activation.h"
#include "shardtrain/model/param_names.h"

namespace shardtrain::model {

std::string router_weight_name(const ModelConfig& cfg, int64_t layer) {
  return names::layer(layer,
                      (std::string(family(cfg.model_type).moe_block) + ".gate.weight").c_str());
}

std::string expert_weight_name(const ModelConfig& cfg, int64_t layer, int64_t expert,
                               ExpertProj p) {
  const Family& fam = family(cfg.model_type);
  const char* proj = p == ExpertProj::kGate ? fam.expert_gate
                     : p == ExpertProj::kUp ? fam.expert_up
                                            : fam.expert_down;
  const std::string local =
      std::string(fam.moe_block) + ".experts." + std::to_string(expert) + "." + proj + ".weight";
  return names::layer(layer, local.c_str());
}

std::vector<int64_t> expert_shape(const ModelConfig& cfg, ExpertProj p) {
  const int64_t h = cfg.hidden_size, i = cfg.expert_intermediate_size;
  return p == ExpertProj::kDown ? std::vector<int64_t>{h, i} : std::vector<int64_t>{i, h};
}

Routing route(const ModelConfig& cfg, const at::Tensor& x, const at::Tensor& router) {
  const at::Tensor logits = at::linear(x, router);  // [N, E] in the compute dtype
  const at::Tensor probs = at::softmax(logits, -1, at::kFloat);
  auto [top, experts] = at::topk(probs, cfg.experts_per_token, -1);
  if (cfg.norm_topk_prob) top = top / top.sum(-1, /*keepdim=*/true);
  if (family(cfg.model_type).routing_in_dtype) top = top.to(logits.scalar_type());
  return {top, experts};
}

ExpertSlots expert_slots(const at::Tensor& experts, int64_t num_experts) {
  ExpertSlots s;
  const at::Tensor flat = experts.reshape({-1});
  // Stable: within an expert the pairs keep their token order.
  s.pairs = std::get<1>(at::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));
  s.tokens = at::floor_divide(s.pairs, experts.size(1));
  const at::Tensor counts = at::bincount(flat, {}, num_experts).to(at::kCPU, at::kLong);
  s.counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + num_experts);
  return s;
}

bool grouped_experts_available(const at::Tensor& x) {
#if defined(SHARDTRAIN_TORCH_CUDA) && defined(SHARDTRAIN_HAVE_CUDA)
  if (!x.is_cuda() || x.scalar_type() != at::kBFloat16) return false;
  return cuda::device_info(x.get_device()).major >= 9;
#else
  (void)x;
  return false;
#endif
}

namespace {

// Each expert's gated MLP over its run of `sorted`: one matmul per expert and projection.
at::Tensor experts_loop(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                        const ExpertSlots& slots) {
  std::vector<at::Tensor> outs;
  int64_t at_slot = 0;
  for (int64_t e = 0; e < cfg.num_experts; ++e) {
    const int64_t n = slots.counts[static_cast<size_t>(e)];
    if (n == 0) continue;  // an expert no token chose computes nothing, as in transformers
    const at::Tensor in = sorted.narrow(0, at_slot, n);
    const at::Tensor h =
        activation(cfg.hidden_act, at::linear(in, w.gate[e])) * at::linear(in, w.up[e]);
    outs.push_back(at::linear(h, w.down[e]));
    at_slot += n;
  }
  return outs.empty() ? sorted.narrow(0, 0, 0) : at::cat(outs);
}

// The same as one grouped GEMM per projection: the runs end at the counts' running sums.
at::Tensor experts_grouped(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& sorted,
                           const ExpertSlots& slots) {
  std::vector<int32_t> ends;
  int64_t total = 0;
  for (const int64_t n : slots.counts) ends.push_back(static_cast<int32_t>(total += n));
  const at::Tensor offs = at::tensor(ends, at::kInt).to(sorted.device());
  // [E, in, out]: each expert's x @ W^T as the grouped GEMM's right operand.
  auto stacked = [](const std::vector<at::Tensor>& ws) { return at::stack(ws).transpose(1, 2); };
  const at::Tensor h = activation(cfg.hidden_act, at::_grouped_mm(sorted, stacked(w.gate), offs)) *
                       at::_grouped_mm(sorted, stacked(w.up), offs);
  return at::_grouped_mm(h, stacked(w.down), offs);
}

}  // namespace

at::Tensor moe_mlp(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& x,
                   ExpertsPath path) {
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  const Routing r = route(cfg, x2, w.router);
  const ExpertSlots slots = expert_slots(r.experts, cfg.num_experts);
  const at::Tensor sorted = x2.index_select(0, slots.tokens);  // [N * k, hidden], by expert
  const bool grouped =
      path == ExpertsPath::kGrouped || (path == ExpertsPath::kAuto && grouped_experts_available(x));
  const at::Tensor y =
      grouped ? experts_grouped(cfg, w, sorted, slots) : experts_loop(cfg, w, sorted, slots);
  const at::Tensor weight = r.weights.reshape({-1}).index_select(0, slots.pairs).unsqueeze(1);
  // Mixtral multiplies in fp32 and rounds the product; Qwen3-MoE's weights are rounded already.
  const at::Tensor weighted = (y * weight).to(x.scalar_type());
  // Back to (token, choice) order and summed over the choices: index_add would keep its source
  // for backward, this keeps only the permutation.
  const at::Tensor back =
      at::empty_like(slots.pairs)
          .scatter_(0, slots.pairs, at::arange(slots.pairs.size(0), slots.pairs.options()));
  return weighted.index_select(0, back).view({x2.size(0), -1, x2.size(1)}).sum(1).view(x.sizes());
}

}  // namespace shardtrain::model
