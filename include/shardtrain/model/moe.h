// A sparse (mixture-of-experts) layer's MLP, as transformers' MixtralSparseMoeBlock and
// Qwen3MoeSparseMoeBlock compute it: the router's softmax in fp32 picks each token's top-k
// experts (their weights renormalised where norm_topk_prob), every token goes to its experts
// (dropless: no capacity), and their outputs come back summed with those weights. The tokens are
// sorted by expert first, so that each expert reads one contiguous run.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "shardtrain/model/config.h"

namespace shardtrain::model {

enum class ExpertProj { kGate, kUp, kDown };
inline constexpr ExpertProj kExpertProjections[] = {ExpertProj::kGate, ExpertProj::kUp,
                                                    ExpertProj::kDown};

// "model.layers.<i>.block_sparse_moe.gate.weight" (Mixtral) / "model.layers.<i>.mlp.gate.weight"
// (Qwen3-MoE): [num_experts, hidden].
std::string router_weight_name(const ModelConfig& cfg, int64_t layer);
// "model.layers.<i>.block_sparse_moe.experts.<e>.w1.weight" /
// "...mlp.experts.<e>.gate_proj.weight": the Hub's per-expert layout, as save_pretrained writes it.
std::string expert_weight_name(const ModelConfig& cfg, int64_t layer, int64_t expert, ExpertProj p);
// [out, in]: gate and up [expert_intermediate_size, hidden], down [hidden, intermediate].
std::vector<int64_t> expert_shape(const ModelConfig& cfg, ExpertProj p);

// Each token's experts and their weights: [N, k] each; the weights in fp32 (Mixtral) or in the
// compute dtype (Qwen3-MoE rounds them), differentiable through the router.
struct Routing {
  at::Tensor weights;
  at::Tensor experts;  // int64
};
// x [N, hidden], router [num_experts, hidden].
Routing route(const ModelConfig& cfg, const at::Tensor& x, const at::Tensor& router);

// The N * k (token, choice) pairs sorted by expert, in token order within each expert: pair
// p = token * k + choice. Expert e's run is counts[e] pairs long, after those of experts < e.
struct ExpertSlots {
  at::Tensor pairs;             // [N * k] int64
  at::Tensor tokens;            // [N * k] int64: pairs / k
  std::vector<int64_t> counts;  // [num_experts], on the host
};
// experts [N, k] int64 (any device); the result on the same device.
ExpertSlots expert_slots(const at::Tensor& experts, int64_t num_experts);

struct MoeWeights {
  at::Tensor router;                       // [num_experts, hidden]
  std::vector<at::Tensor> gate, up, down;  // one per expert
};

// How the experts multiply: one matmul per expert over its run of tokens (everywhere), or one
// grouped GEMM per projection over every run (at::_grouped_mm: bf16 on CUDA from sm90; the
// experts' weights stacked first, a copy of the layer's experts).
enum class ExpertsPath { kAuto, kLoop, kGrouped };
// kAuto's choice for x: grouped for bf16 on a GPU of compute capability 9.0 or newer.
bool grouped_experts_available(const at::Tensor& x);

// x [B, T, hidden] -> [B, T, hidden].
at::Tensor moe_mlp(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& x,
                   ExpertsPath path = ExpertsPath::kAuto);

}  // namespace shardtrain::model
