// The mixture-of-experts layer's parts on the CPU: the (token, choice) pairs sorted by expert, the
// sparse MLP against a token-by-token loop written from transformers' definition (values and
// gradients, an expert no token chooses included), and what a config.json's MoE fields give.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "shardtrain/model/config.h"
#include "shardtrain/model/moe.h"
#include "shardtrain/model/norm_activation.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

namespace {

model::ModelConfig moe_config(const char* type, int64_t experts, int64_t k, bool norm) {
  nlohmann::json j = {{"model_type", type},
                      {"vocab_size", 64},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 2},
                      {"num_local_experts", experts},
                      {"num_experts_per_tok", k},
                      {"moe_intermediate_size", 12},
                      {"norm_topk_prob", norm},
                      {"head_dim", 8}};
  return model::model_from_hf_json(j, type);
}

}  // namespace

TEST(MoeSlots, PairsSortedByExpertInTokenOrder) {
  const at::Tensor experts = at::tensor({2, 0, 2, 1, 0, 2}, at::kLong).view({3, 2});
  const model::ExpertSlots s = model::expert_slots(experts, 4);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{2, 1, 3, 0}));  // expert 3: no token
  const std::vector<int64_t> pairs(s.pairs.data_ptr<int64_t>(), s.pairs.data_ptr<int64_t>() + 6);
  EXPECT_EQ(pairs, (std::vector<int64_t>{1, 4, 3, 0, 2, 5}));
  const std::vector<int64_t> tokens(s.tokens.data_ptr<int64_t>(), s.tokens.data_ptr<int64_t>() + 6);
  EXPECT_EQ(tokens, (std::vector<int64_t>{0, 2, 1, 0, 1, 2}));
}

// Each token's output is sum over its choices of weight * down(act(gate x) * up x), the weights
// the router's top-k softmax (renormalised where norm_topk_prob): written token by token.
TEST(MoeMlp, EqualsATokenByTokenLoopWithAnUnchosenExpert) {
  for (const auto& [type, k, norm] : std::vector<std::tuple<const char*, int64_t, bool>>{
           {"mixtral", 2, true}, {"qwen3_moe", 1, false}, {"qwen3_moe", 2, false}}) {
    const model::ModelConfig cfg = moe_config(type, 4, k, norm);
    at::manual_seed(1);
    const int64_t H = cfg.hidden_size, E = cfg.num_experts;
    model::MoeWeights w;
    // x > 0 and expert 3's router row < 0: no token ever chooses expert 3.
    w.router = at::randn({E, H}).abs();
    w.router[3].fill_(-1.0);
    w.router.requires_grad_(true);
    const int64_t I = cfg.expert_intermediate_size;
    for (int64_t e = 0; e < E; ++e) {
      w.gate.push_back(at::randn({I, H}).requires_grad_(true));
      w.up.push_back(at::randn({I, H}).requires_grad_(true));
      w.down.push_back(at::randn({H, I}).requires_grad_(true));
    }
    const at::Tensor x = at::rand({2, 5, H}).requires_grad_(true);
    const at::Tensor got = model::moe_mlp(cfg, w, x);
    std::vector<at::Tensor> rows;
    const at::Tensor flat = x.reshape({-1, H});
    for (int64_t t = 0; t < flat.size(0); ++t) {
      const at::Tensor p = at::softmax(at::linear(flat[t], w.router), -1);
      auto [top, idx] = at::topk(p, k);
      if (norm) top = top / top.sum();
      at::Tensor out = at::zeros({H});
      for (int64_t c = 0; c < k; ++c) {
        const int64_t e = idx[c].item<int64_t>();
        EXPECT_NE(e, 3) << type;
        const at::Tensor h = model::activation(cfg.hidden_act, at::linear(flat[t], w.gate[e])) *
                             at::linear(flat[t], w.up[e]);
        out = out + top[c] * at::linear(h, w.down[e]);
      }
      rows.push_back(out);
    }
    const at::Tensor want = at::stack(rows).view(x.sizes());
    EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << type;
    const at::Tensor weighting = at::randn(got.sizes());
    const std::vector<at::Tensor> wrt = {x, w.router, w.gate[0], w.down[2], w.up[3]};
    const auto g1 = torch::autograd::grad({(got * weighting).sum()}, wrt, {}, {}, false, true);
    const auto g2 = torch::autograd::grad({(want * weighting).sum()}, wrt, {}, {}, false, true);
    for (size_t i = 0; i + 1 < wrt.size(); ++i)
      EXPECT_TRUE(at::allclose(g1[i], g2[i], 1e-5, 1e-5)) << type << " gradient " << i;
    EXPECT_FALSE(g1[4].defined()) << type << ": the unchosen expert is in no graph";
  }
}

// The grouped GEMM path (at::_grouped_mm; LibTorch's CPU fallback here, CUDA's kernel on sm90)
// gives the loop's values and gradients, with an expert that no token chose (an empty group).
TEST(MoeMlp, GroupedGemmEqualsTheLoop) {
  const model::ModelConfig cfg = moe_config("qwen3_moe", 4, 2, true);
  at::manual_seed(2);
  model::MoeWeights w;
  w.router = at::randn({4, cfg.hidden_size}).abs();
  w.router[1].fill_(-1.0);  // x > 0: expert 1 gets no token
  for (int64_t e = 0; e < 4; ++e) {
    w.gate.push_back(
        at::randn({cfg.expert_intermediate_size, cfg.hidden_size}).requires_grad_(true));
    w.up.push_back(at::randn({cfg.expert_intermediate_size, cfg.hidden_size}).requires_grad_(true));
    w.down.push_back(
        at::randn({cfg.hidden_size, cfg.expert_intermediate_size}).requires_grad_(true));
  }
  const at::Tensor x = at::rand({3, 7, cfg.hidden_size}).requires_grad_(true);
  const at::Tensor weighting = at::randn({3, 7, cfg.hidden_size});
  std::vector<at::Tensor> got[2];
  for (const auto path : {model::ExpertsPath::kLoop, model::ExpertsPath::kGrouped}) {
    const at::Tensor y = model::moe_mlp(cfg, w, x, path);
    const auto g =
        torch::autograd::grad({(y * weighting).sum()}, {x, w.gate[0], w.up[2], w.down[3]});
    got[path == model::ExpertsPath::kGrouped] = {y, g[0], g[1], g[2], g[3]};
  }
  for (size_t i = 0; i < got[0].size(); ++i)
    EXPECT_TRUE(at::allclose(got[0][i], got[1][i], 1e-5, 1e-5)) << "output/gradient " << i;
  EXPECT_FALSE(model::grouped_experts_available(x)) << "kAuto takes the loop on the CPU";
}

TEST(MoeConfig, SparseLayersExpertsAndRefusedFields) {
  nlohmann::json j = {{"model_type", "qwen3_moe"},
                      {"vocab_size", 64},
                      {"hidden_size", 16},
                      {"intermediate_size", 24},
                      {"num_hidden_layers", 4},
                      {"num_attention_heads", 2},
                      {"num_experts", 8},
                      {"num_experts_per_tok", 2},
                      {"moe_intermediate_size", 12},
                      {"decoder_sparse_step", 2},
                      {"head_dim", 8},
                      {"mlp_only_layers", {3}}};
  const model::ModelConfig c = model::model_from_hf_json(j, "q");
  EXPECT_EQ(c.num_experts, 8);         // Qwen3's own name, num_experts
  EXPECT_EQ(c.norm_topk_prob, false);  // Qwen3MoeConfig's default
  std::vector<bool> sparse;
  for (int64_t l = 0; l < 4; ++l) sparse.push_back(c.moe_layer(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false}));  // step 2; layer 3 dense
  // Every parameter once: two dense MLPs, and one sparse layer's router and 8 experts.
  const int64_t attention = 4 * (16 * 16), dense = 3 * 16 * 24, norms = 2 * 16 + 2 * 8;
  const int64_t sparse_mlp = 8 * 16 + 8 * 3 * 16 * 12;
  EXPECT_EQ(c.num_params(), 4 * (attention + norms) + 3 * dense + sparse_mlp + 2 * 64 * 16 + 16);
  // What a token passes through (norms counted, as num_matmul_params counts them): 2 of 8 experts.
  EXPECT_EQ(c.num_active_matmul_params(),
            4 * (attention + norms) + 3 * dense + 8 * 16 + 2 * 3 * 16 * 12 + 64 * 16 + 16);
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"router_jitter_noise", 0.01}, {"clip_qkv", 8.0}}) {
    nlohmann::json bad = j;
    bad["model_type"] = "mixtral";
    bad[key] = value;
    try {
      model::model_from_hf_json(bad, "m");
      ADD_FAILURE() << key << " was accepted";
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

TEST(MoeRoute, RowsGoToTheirExpertsRanksAndRegroupByExpert) {
  // Rank 0 of 2, 4 experts (2 each): its pairs per expert, and what each source sends to each of
  // its 2 experts.
  const model::ExpertRoute r = model::expert_route({3, 0, 2, 1}, {2, 1, 1, 2}, 2);
  EXPECT_EQ(r.send_rows, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r.recv_rows, (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(r.local_counts, (std::vector<int64_t>{3, 3}));
  // Arrived: source 0's 2 rows for expert 0 and 1 for expert 1, then source 1's 1 and 2.
  EXPECT_EQ(r.by_expert, (std::vector<int64_t>{0, 1, 3, 2, 4, 5}));
  const model::ExpertRoute none = model::expert_route({0, 0, 0, 0}, {0, 0, 0, 0}, 2);
  EXPECT_TRUE(none.by_expert.empty());
  EXPECT_EQ(none.local_counts, (std::vector<int64_t>{0, 0}));
}

TEST(MoeAux, RoutersGradientIsTransformersLoadBalancingLossGradient) {
  // transformers' load_balancing_loss_func over two sparse layers' router logits, differentiated by
  // autograd, against the routers' sums and the gradient RouterAux gives them.
  const model::ModelConfig cfg = moe_config("qwen3_moe", 4, 2, true);
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 5, 16}), y = at::randn({5, 16});
  const at::Tensor w1 = at::randn({4, 16}).requires_grad_(true);
  const at::Tensor w2 = at::randn({4, 16}).requires_grad_(true);
  const double coef = 0.3;
  at::Tensor counts = at::zeros({4}), probs = at::zeros({4});
  for (const auto& [in, w] : {std::pair{x.reshape({-1, 16}), w1}, {y, w2}}) {
    const at::Tensor p = at::softmax(at::linear(in, w), -1);
    counts +=
        at::one_hot(std::get<1>(at::topk(p, 2, -1)), 4).sum(at::IntArrayRef{0, 1}).to(at::kFloat);
    probs += p.sum(0);
  }
  const double rows = 10 + 5;
  const at::Tensor reference = (counts / rows * (probs / rows)).sum() * 4;
  (reference * coef).backward();

  model::RouterAux aux;
  aux.record = true;
  aux.stats = at::zeros({2 * 4 + 1}, at::kDouble);
  const at::Tensor v1 = w1.detach().requires_grad_(true), v2 = w2.detach().requires_grad_(true);
  std::vector<at::Tensor> weights;
  for (const auto& [in, w] : {std::pair{x.reshape({-1, 16}), v1}, {y, v2}})
    weights.push_back(model::route(cfg, in, w, &aux).weights);
  aux.record = false;
  const at::Tensor ours = aux.finish(4, coef);
  EXPECT_NEAR(ours.item<double>(), reference.item<double>(), 1e-6);
  // Only the aux term: the routing weights' own gradient is zero here.
  torch::autograd::backward({weights[0].sum() * 0 + weights[1].sum() * 0});
  EXPECT_TRUE(at::allclose(v1.grad(), w1.grad(), 1e-5, 1e-6)) << v1.grad() - w1.grad();
  EXPECT_TRUE(at::allclose(v2.grad(), w2.grad(), 1e-5, 1e-6));
}
