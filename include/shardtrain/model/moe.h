// A sparse (mixture-of-experts) layer's MLP, as transformers' MixtralSparseMoeBlock and
// Qwen3MoeSparseMoeBlock compute it: the router's softmax in fp32 picks each token's top-k
// experts (their weights renormalised where norm_topk_prob), every token goes to its experts
// (dropless: no capacity), and their outputs come back summed with those weights. The tokens are
// sorted by expert first, so that each expert reads one contiguous run.
#pragma once
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/model/param_names.h"

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

// transformers' load_balancing_loss_func over a pass (output_router_logits): aux = E * sum_e
// (C_e / R) (P_e / R), C_e the (token, choice) pairs routed to expert e and P_e its softmax
// probabilities summed over every sparse layer's tokens, R = tokens * sparse layers. The routers
// add their sums to `stats` while `record` is on; in backward each token's probabilities take
// `grad` [E] (d (weight * aux) / d p_e, known once the batch's sums are), the counts being
// constant.
struct RouterAux {
  bool record = false;
  at::Tensor stats;  // [2E + 1] fp64: C, P, R (this rank's tokens until summed over the ranks)
  at::Tensor grad;   // [E] fp32; undefined: none
  at::Tensor valid;  // [N] bool: the tokens that count (a context share's padding does not)
  // aux from the summed stats, and `grad` for a loss weight `coef` (router_aux_loss_coef over the
  // micro-batches). Returns aux, 0-d fp64.
  at::Tensor finish(int64_t num_experts, double coef);
};

// Each token's experts and their weights: [N, k] each; the weights in fp32 (Mixtral) or in the
// compute dtype (Qwen3-MoE rounds them), differentiable through the router.
struct Routing {
  at::Tensor weights;
  at::Tensor experts;  // int64
};
// x [N, hidden], router [num_experts, hidden].
// aux: the load-balancing loss's sums and gradient (nullptr: none).
Routing route(const ModelConfig& cfg, const at::Tensor& x, const at::Tensor& router,
              RouterAux* aux = nullptr);

// The N * k (token, choice) pairs sorted by expert, in token order within each expert: pair
// p = token * k + choice. Expert e's run is counts[e] pairs long, after those of experts < e.
struct ExpertSlots {
  at::Tensor pairs;             // [N * k] int64
  at::Tensor tokens;            // [N * k] int64: pairs / k
  std::vector<int64_t> counts;  // [num_experts], on the host
};
// experts [N, k] int64 (any device); the result on the same device.
ExpertSlots expert_slots(const at::Tensor& experts, int64_t num_experts);

// Expert parallelism as a layer sees it: `size` ranks split every sparse layer's experts, rank r
// holding experts [r * E / size, (r + 1) * E / size), and each token goes to its experts' ranks
// and back by all-to-all. exchange: rows by count (comm::Communicator::all_to_all_async), done
// when it returns (on a GPU: ordered on the compute stream).
using RowExchange =
    std::function<void(const at::Tensor& send, const std::vector<int64_t>& send_rows,
                       const at::Tensor& recv, const std::vector<int64_t>& recv_rows)>;
struct ExpertGroup {
  int size = 1, rank = 0;
  RowExchange exchange;
  int64_t local(const ModelConfig& cfg) const { return cfg.num_experts / size; }
  int64_t first(const ModelConfig& cfg) const { return rank * local(cfg); }
};
// Pure: where expert parallelism's rows go and come back from. counts [E]: this rank's pairs per
// expert; received [size * local]: what each source rank sends to each of this rank's experts.
struct ExpertRoute {
  std::vector<int64_t> send_rows, recv_rows;  // [size]: per destination, per source
  std::vector<int64_t> local_counts;          // [local]: each local expert's rows, all sources
  std::vector<int64_t> by_expert;  // [received rows]: the received row at each place when the
                                   // rows are regrouped by local expert, source order within
};
ExpertRoute expert_route(const std::vector<int64_t>& counts, const std::vector<int64_t>& received,
                         int size);

struct MoeWeights {
  at::Tensor router;                       // [num_experts, hidden]
  std::vector<at::Tensor> gate, up, down;  // one per expert this rank holds, from first_expert
  int64_t first_expert = 0;
};

// How the experts multiply: one matmul per expert over its run of tokens (everywhere), or one
// grouped GEMM per projection over every run (at::_grouped_mm: bf16 on CUDA from sm90; the
// experts' weights stacked first, a copy of the layer's experts).
enum class ExpertsPath { kAuto, kLoop, kGrouped };
// kAuto's choice for x: grouped for bf16 on a GPU of compute capability 9.0 or newer.
bool grouped_experts_available(const at::Tensor& x);

// Layer `layer`'s router and the experts this rank holds (group: expert parallelism's share;
// nullptr: every expert), by Hugging Face name.
MoeWeights moe_weights(const ModelConfig& cfg, const WeightLookup& w, int64_t layer,
                       const ExpertGroup* group);

// x [B, T, hidden] -> [B, T, hidden]. group: expert parallelism (nullptr or size 1: every
// expert here); every rank of the group calls it together, with its tokens or none.
at::Tensor moe_mlp(const ModelConfig& cfg, const MoeWeights& w, const at::Tensor& x,
                   ExpertsPath path = ExpertsPath::kAuto, const ExpertGroup* group = nullptr,
                   RouterAux* aux = nullptr);
// A rank without rows under expert parallelism still serves its experts: the sparse MLP on no
// tokens of its own, joining every exchange and running its experts on the rows the others send
// (differentiable like moe_mlp; a backward with a zero gradient serves theirs). Returns [0, 1,
// hidden].
at::Tensor serve_experts(const ModelConfig& cfg, const MoeWeights& w, const ExpertGroup& group,
                         const at::TensorOptions& options);
// Differentiable all-to-all of rows (backward sends the gradients back the other way).
at::Tensor exchange_rows(const ExpertGroup& group, const at::Tensor& send,
                         const std::vector<int64_t>& send_rows,
                         const std::vector<int64_t>& recv_rows);

}  // namespace shardtrain::model
