// The model families on the GPU: each family's forward (its norms, q/k norms, soft-caps, local
// RoPE, partial rotary, merged checkpoint projections) on CUDA equals the CPU's in fp32, and in
// bf16 within bf16's rounding, on the composite and the fused layer paths, packed rows included.
// Skipped, with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gpu_skip.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/ATen.h>

#include <nlohmann/json.hpp>

#include "shardtrain/model/fp8.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/rotary.h"
#endif

#ifdef SHARDTRAIN_TORCH_CUDA
namespace {
using namespace shardtrain;

model::ModelConfig family_config(const char* type, nlohmann::json extra) {
  nlohmann::json j = {
      {"model_type", type},       {"vocab_size", 256},      {"hidden_size", 128},
      {"intermediate_size", 256}, {"num_hidden_layers", 3}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2}, {"head_dim", 32},         {"max_position_embeddings", 256},
      {"pad_token_id", 0}};
  j.update(extra);
  return model::model_from_hf_json(j, type);
}

// Logits of one batch (two rows, the second packed as two documents) on `device` in `dtype`.
at::Tensor logits(const model::ModelConfig& m, const at::Device& device, at::ScalarType dtype,
                  bool fused, model::Fp8Mode fp8 = model::Fp8Mode::kOff) {
  const auto store = model::ParamStore::initialize(m, 3);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : store.named())
    w[name] = (t + 0.05 * at::randn_like(t)).to(device, dtype);
  // The fused path's merged views, as an FSDP unit lays them (Phi-3 holds them itself).
  for (int64_t l = 0; l < m.num_layers && fused; ++l)
    for (const model::Merged g : model::kMerged) {
      std::vector<at::Tensor> ws;
      for (const model::Proj p : model::merged_members(g))
        if (w.count(model::proj_weight_name(l, p)))
          ws.push_back(w.at(model::proj_weight_name(l, p)));
      if (!ws.empty()) w[model::merged_weight_name(l, g)] = at::cat(ws);
    }
  const int64_t T = 96;
  model::Rotary rope(m, T);
  rope.to(device, dtype);
  const at::Tensor tokens = at::arange(2 * T, at::kLong).remainder(m.vocab_size).view({2, T});
  const at::Tensor positions = at::stack(
      {at::arange(T, at::kLong), at::cat({at::arange(60, at::kLong), at::arange(36, at::kLong)})});
  return model::llama_forward(
             m, [&](const std::string& n) { return w.at(n); }, tokens.to(device), rope, dtype,
             nullptr, positions, model::LayerPath{false, fused})
      .to(at::kCPU, at::kFloat);
}
}  // namespace
#endif

TEST(GpuFamilies, EachFamilysForwardOnCudaEqualsTheCpus) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  at::manual_seed(0);
  const std::vector<std::pair<std::string, model::ModelConfig>> cases = {
      {"qwen3", family_config("qwen3", {{"attention_bias", true}})},
      {"olmo2", family_config("olmo2", nlohmann::json::object())},
      {"gemma2", family_config("gemma2", {{"query_pre_attn_scalar", 24},
                                          {"sliding_window", 32},
                                          {"attn_logit_softcapping", 5.0},
                                          {"final_logit_softcapping", 3.0}})},
      {"gemma3", family_config("gemma3_text", {{"sliding_window", 32},
                                               {"sliding_window_pattern", 2},
                                               {"rope_local_base_freq", 100.0}})},
      {"phi4-mini", family_config("phi3", {{"partial_rotary_factor", 0.75},
                                           {"original_max_position_embeddings", 64},
                                           {"rope_scaling",
                                            {{"rope_type", "longrope"},
                                             {"short_factor", std::vector<double>(12, 1.5)},
                                             {"long_factor", std::vector<double>(12, 3.0)}}}})}};
  const at::Device gpu(at::kCUDA, 0);
  for (const auto& [name, m] : cases) {
    const at::Tensor ref = logits(m, at::kCPU, at::kFloat, false);
    for (const bool fused : {false, true}) {
      const double fp32 = (logits(m, gpu, at::kFloat, fused) - ref).abs().max().item<double>();
      const at::Tensor bf = logits(m, gpu, at::kBFloat16, fused);
      const double bf16 = ((bf - ref).norm() / ref.norm()).item<double>();
      std::printf("family %s fused %d: fp32 max |diff| %.2e, bf16 relative L2 %.2e\n", name.c_str(),
                  fused, fp32, bf16);
      EXPECT_LE(fp32, 1e-3) << name << " fused " << fused;  // TF32 may be on: fp32 matmuls differ
      EXPECT_LE(bf16, 2e-2) << name << " fused " << fused;
    }
    // The projections' GEMMs in float8 (tensorwise) where the GPU has them: every family's
    // shapes here are multiples of 16.
    if (model::fp8_device_problem(gpu).empty()) {
      const at::Tensor f8 = logits(m, gpu, at::kBFloat16, true, model::Fp8Mode::kTensorwise);
      const double rel = ((f8 - ref).norm() / ref.norm()).item<double>();
      std::printf("family %s fp8 tensorwise: relative L2 %.2e\n", name.c_str(), rel);
      EXPECT_LE(rel, 0.15) << name << " fp8";  // e4m3's 3 mantissa bits, a few layers deep
    }
  }
#endif
}
