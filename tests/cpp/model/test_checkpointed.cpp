// Selective activation checkpointing on one decoder layer: its output and gradients against the
// plain layer's (the same ops run again, so the same values), and what it keeps, measured by the
// counting CPU allocator (runtime/host_tensor_memory.h) against the memory model's figure.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "shardtrain/model/activation_memory.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/rotary.h"
#include "shardtrain/model/token_layout.h"
#include "shardtrain/runtime/host_tensor_memory.h"

using namespace shardtrain;

namespace {
struct LayerRun {
  at::Tensor out;
  std::vector<at::Tensor> grads;  // the input's, then each layer-0 parameter's
};

// Layer 0 of `params` on x in `dtype`, and the gradients of a fixed weighting of its output.
LayerRun run_layer(const model::ModelConfig& m, const model::ParamStore& params,
                   const at::Tensor& x0, const model::TokenLayout& layout, at::ScalarType dtype,
                   bool selective) {
  const model::WeightLookup lookup = [&params, dtype](const std::string& name) {
    return params.get(name).to(dtype);
  };
  const model::LayerWeights w = model::LayerWeights::bind(m, lookup, 0);
  const at::Tensor x = x0.to(dtype).detach().requires_grad_(true);
  const at::Tensor y = model::decoder_layer(m, w, x, layout, model::LayerPath{selective, false});
  const at::Tensor weighting = at::linspace(-1, 1, y.numel()).view(y.sizes());
  std::vector<at::Tensor> wrt{x};
  for (size_t i = 0; i < params.specs().size(); ++i)
    if (params.specs()[i].unit == 1) wrt.push_back(params.tensors()[i]);
  const auto grads = torch::autograd::grad({(y.to(at::kFloat) * weighting).sum()}, wrt);
  return {y.detach(), grads};
}

// ||a - b|| / ||b||.
double relative(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).norm().item<double>() /
         b.to(at::kFloat).norm().item<double>();
}

int64_t held() { return runtime::host_tensor_bytes(); }
}  // namespace

// fp32 and bf16, one document per row and packed rows, SiLU and tanh-GELU, q/k/v biases (Qwen2):
// the output is bit-identical, and the gradients equal up to the order in which the three uses
// of a norm's input add up (the residual's, and the norm's two inside the region): 1e-6 relative
// over all of them in fp32. A bias's gradient sums its output's gradient over the tokens, where
// those terms largely cancel, so that last-bit difference shows more there: 1e-5 per tensor.
TEST(SelectiveCheckpointing, LayerEqualsThePlainLayer) {
  const int64_t B = 2, T = 24;
  for (const std::string variant : {"llama", "qwen2-gelu"}) {
    model::ModelConfig m = model::model_preset("tiny");
    if (variant != "llama") {
      m.model_type = "qwen2";
      m.hidden_act = "gelu_pytorch_tanh";
    }
    at::manual_seed(7);
    model::ParamStore params = model::ParamStore::initialize(m, 2);
    for (size_t i = 0; i < params.specs().size();
         ++i)  // non-zero biases and norms, which the init leaves at 0 and 1
      if (params.specs()[i].is_bias || params.specs()[i].is_norm)
        params.tensors()[i].detach().uniform_(0.5, 1.5);
    const at::Tensor x = at::randn({B, T, m.hidden_size});
    const model::Rotary rope(m, T);
    const at::Tensor positions =
        at::cat({at::arange(9), at::arange(T - 9)}).to(at::kLong).repeat({B, 1});
    for (const bool packed : {false, true})
      for (const auto dtype : {at::kFloat, at::kBFloat16}) {
        const model::TokenLayout layout =
            model::token_layout(rope, packed ? positions : at::Tensor(), T, at::kCPU, dtype);
        const LayerRun plain = run_layer(m, params, x, layout, dtype, false);
        const LayerRun selective = run_layer(m, params, x, layout, dtype, true);
        const std::string where =
            variant + (packed ? " packed " : " padded ") + c10::toString(dtype);
        EXPECT_TRUE(at::equal(selective.out, plain.out)) << where;
        ASSERT_EQ(selective.grads.size(), plain.grads.size());
        ASSERT_GT(plain.grads.size(), 8u) << "the input and the layer's parameters";
        std::vector<at::Tensor> all_selective, all_plain;
        double worst = 0;
        for (size_t i = 0; i < plain.grads.size(); ++i) {
          ASSERT_TRUE(selective.grads[i].defined() && plain.grads[i].defined())
              << where << " gradient " << i;
          worst = std::max(worst, relative(selective.grads[i], plain.grads[i]));
          all_selective.push_back(selective.grads[i].flatten().to(at::kFloat));
          all_plain.push_back(plain.grads[i].flatten().to(at::kFloat));
        }
        const double overall = relative(at::cat(all_selective), at::cat(all_plain));
        // bf16 rounds each gradient to 8 bits, which hides the order; fp32 shows it.
        EXPECT_LE(overall, dtype == at::kFloat ? 1e-6 : 1e-2) << where;
        EXPECT_LE(worst, dtype == at::kFloat ? 1e-5 : 1e-2) << where;
        std::cout << where << ": output identical; gradients " << overall
                  << " apart (relative norm), the worst tensor " << worst << "\n";
      }
  }
}

// What a selective layer keeps after its forward, measured, against
// ActivationBytes::layer_selective, beside the plain layer's against ActivationBytes::layer; and
// what its backward holds beyond the plain layer's backward (the recomputed regions' tensors)
// against selective_recompute.
TEST(MemoryModel, SelectiveLayerBytesMatchTheCountingAllocator) {
  runtime::track_host_tensor_memory();
  const model::ModelConfig m = model::model_preset("tiny");
  const int64_t B = 2, T = 128;
  at::manual_seed(0);
  const model::ParamStore params = model::ParamStore::initialize(m, 1);
  const at::Tensor positions =
      at::cat({at::arange(50), at::arange(78)}).to(at::kLong).repeat({B, 1});
  for (const auto dtype : {at::kFloat, at::kBFloat16})
    for (const bool packed : {false, true}) {
      model::Rotary rope(m, T);
      rope.to(at::kCPU,
              dtype);  // as the engine casts it once: no copy of cos and sin in each layer
      const model::WeightLookup lookup = [&params, dtype](const std::string& name) {
        return params.get(name).to(dtype);
      };
      const model::LayerWeights w = model::LayerWeights::bind(m, lookup, 0);
      const model::PackedRows rows{T, /*varlen=*/false};
      const int elt = dtype == at::kFloat ? 4 : 2;
      const model::ActivationBytes a =
          model::activation_bytes_per_token(m, elt, nullptr, packed ? &rows : nullptr);
      const model::TokenLayout layout =
          model::token_layout(rope, packed ? positions : at::Tensor(), T, at::kCPU, dtype);
      const at::Tensor x = at::randn({B, T, m.hidden_size}).to(dtype).set_requires_grad(true);
      const at::Tensor grad_out = at::randn({B, T, m.hidden_size}).to(dtype);
      int64_t kept[2] = {0, 0}, working[2] = {0, 0};
      for (const bool selective : {false, true}) {
        const int64_t before = held();
        at::Tensor y = model::decoder_layer(m, w, x, layout, model::LayerPath{selective, false});
        kept[selective] = held() - before;
        runtime::reset_host_tensor_peak();
        y.backward(grad_out);
        working[selective] = runtime::host_tensor_peak_bytes() - before - kept[selective];
        y = at::Tensor();
        x.mutable_grad() = at::Tensor();
        for (const at::Tensor& p : params.tensors()) p.mutable_grad() = at::Tensor();
        EXPECT_EQ(held(), before) << "what the forward kept is freed";
      }
      const int64_t tokens = B * T;
      const std::string where = std::string(packed ? "packed " : "padded ") + c10::toString(dtype);
      const double recompute = static_cast<double>(working[1] - working[0]) / tokens;
      std::cout << where << " layer: plain keeps " << kept[0] / tokens << " bytes per token (model "
                << a.layer << "), selective " << kept[1] / tokens << " (model " << a.layer_selective
                << "); its backward holds " << recompute << " more than the plain layer's (model "
                << a.selective_recompute << ")\n";
      // The plain layer's bf16 figure also counts the residual, which only fp32's norm keeps (as
      // its fp32 input): under bf16 the model is e·h per token high there, and is not judged here.
      if (dtype == at::kFloat)
        EXPECT_NEAR(static_cast<double>(kept[0]) / tokens, static_cast<double>(a.layer),
                    0.02 * a.layer)
            << where;
      EXPECT_NEAR(static_cast<double>(kept[1]) / tokens, static_cast<double>(a.layer_selective),
                  0.02 * a.layer_selective)
          << where;
      EXPECT_NEAR(recompute, static_cast<double>(a.selective_recompute),
                  0.1 * a.selective_recompute)
          << where;
      EXPECT_LT(kept[1], kept[0]) << where;
    }
}

// The families' layers (q/k norms per head and over the whole projection, Gemma's norms after the
// blocks, an explicit head_dim, soft-capped eager attention with its [T, T] scores, experts): what
// a plain fp32 layer keeps, measured, against ActivationBytes::layer with the eager attention's
// terms.
TEST(MemoryModel, FamilyLayerBytesMatchTheCountingAllocator) {
  runtime::track_host_tensor_memory();
  const int64_t B = 2, T = 96;
  const nlohmann::json base = {{"vocab_size", 128},
                               {"hidden_size", 64},
                               {"intermediate_size", 176},
                               {"num_hidden_layers", 1},
                               {"num_attention_heads", 4},
                               {"num_key_value_heads", 2},
                               {"max_position_embeddings", 256}};
  const std::vector<std::pair<std::string, nlohmann::json>> variants = {
      {"qwen3", {{"model_type", "qwen3"}, {"head_dim", 32}}},
      {"olmo2", {{"model_type", "olmo2"}}},
      {"gemma3", {{"model_type", "gemma3_text"}, {"head_dim", 16}}},
      {"gemma2", {{"model_type", "gemma2"}, {"head_dim", 32}, {"attn_logit_softcapping", 50.0}}},
      {"mixtral",
       {{"model_type", "mixtral"}, {"num_local_experts", 4}, {"num_experts_per_tok", 2}}},
      {"qwen3_moe",
       {{"model_type", "qwen3_moe"},
        {"head_dim", 16},
        {"num_local_experts", 8},
        {"num_experts_per_tok", 2},
        {"moe_intermediate_size", 48}}}};
  for (const auto& [name, extra] : variants) {
    nlohmann::json j = base;
    j.update(extra);
    const model::ModelConfig m = model::model_from_hf_json(j, name);
    at::manual_seed(0);
    const model::ParamStore params = model::ParamStore::initialize(m, 1);
    model::Rotary rope(m, T);
    const model::WeightLookup lookup = [&params](const std::string& n) { return params.get(n); };
    const model::LayerWeights w = model::LayerWeights::bind(m, lookup, 0);
    const model::TokenLayout layout =
        model::token_layout(rope, at::Tensor(), T, at::kCPU, at::kFloat);
    const at::Tensor x = at::randn({B, T, m.hidden_size}).set_requires_grad(true);
    const int64_t before = held();
    at::Tensor y = model::decoder_layer(m, w, x, layout, model::LayerPath{false, false});
    const double kept = static_cast<double>(held() - before) / (B * T);
    y = at::Tensor();
    const model::ActivationBytes a =
        model::with_eager_attention(model::activation_bytes_per_token(m, 4), m, 4, T);
    std::cout << name << " layer keeps " << kept << " bytes per token (model " << a.layer << ")\n";
    EXPECT_NEAR(kept, static_cast<double>(a.layer), 0.05 * a.layer) << name;
    EXPECT_EQ(held(), before) << name << ": what the forward kept is freed";
  }
}
