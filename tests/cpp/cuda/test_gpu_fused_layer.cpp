// The fused layer path (--fused-layers) against the composite one on the GPU: a decoder layer's
// output and gradients, and three training steps through the CLI, in fp32 and bf16. Skipped,
// with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "gpu_skip.h"
#include "gpu_support.h"
#include "run_binary.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/ATen.h>

#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "shardtrain/model/token_layout.h"
#endif

using namespace testing_support;

#ifdef SHARDTRAIN_TORCH_CUDA
namespace {
using namespace shardtrain;

struct LayerRun {
  at::Tensor out, dx;
  std::map<std::string, at::Tensor> grads;
};

// Layer 0 of a seeded model, its weights on the GPU in `dtype` (and merged as the FSDP unit's
// views would be, by cat), on one batch of packed or plain rows.
LayerRun run_layer(const model::ModelConfig& m, at::ScalarType dtype, bool fused, bool packed) {
  const auto store = model::ParamStore::initialize(m, 5);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : store.named())
    w[name] = t.to(at::kCUDA, dtype).detach().requires_grad_(true);
  std::map<std::string, at::Tensor> merged;
  for (const model::Merged g : model::kMerged) {
    std::vector<at::Tensor> ws, bs;
    for (const model::Proj p : model::merged_members(g)) {
      ws.push_back(w.at(model::proj_weight_name(0, p)));
      if (model::has_bias(m, p)) bs.push_back(w.at(model::proj_bias_name(0, p)));
    }
    merged[model::merged_weight_name(0, g)] = at::cat(ws);
    if (!bs.empty()) merged[model::merged_bias_name(0, g)] = at::cat(bs);
  }
  const auto lookup = [&](const std::string& n) {
    return merged.count(n) ? merged.at(n) : w.at(n);
  };
  const int64_t B = 2, T = 64;
  model::Rotary rope(m, T);
  rope.to(at::Device(at::kCUDA, 0));
  at::Tensor positions;
  if (packed)
    positions =
        at::cat({at::arange(40, at::kLong), at::arange(24, at::kLong)}).expand({B, T}).contiguous();
  // Fused: packed rows as the engine hands them to the rotary kernel, positions and whole tables.
  const auto layout =
      model::token_layout(rope, positions, T, at::Device(at::kCUDA, 0), dtype, /*gather=*/!fused);
  if (fused && packed) EXPECT_TRUE(layout.positions.defined() && !layout.cos.defined());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  const at::Tensor x =
      at::randn({B, T, m.hidden_size}, gen).to(at::kCUDA, dtype).requires_grad_(true);
  const auto lw = model::LayerWeights::bind(m, lookup, 0, nullptr, /*merge=*/fused);
  LayerRun r;
  r.out = model::decoder_layer(m, lw, x, layout, model::LayerPath{false, fused});
  r.out.backward(at::ones_like(r.out));
  r.dx = x.grad();
  for (const auto& [name, t] : w)
    if (t.grad().defined()) r.grads[name] = t.grad();
  return r;
}
}  // namespace
#endif

TEST(GpuFusedLayer, DecoderLayerMatchesCompositeInFp32AndBf16) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  model::ModelConfig qwen = model::model_preset("tiny");
  qwen.model_type = "qwen2";
  for (const auto& m : {model::model_preset("tiny"), qwen})
    for (const auto dtype : {at::kFloat, at::kBFloat16})
      for (const bool packed : {false, true}) {
        const std::string where =
            m.model_type + " " + c10::toString(dtype) + (packed ? " packed" : "");
        const auto a = run_layer(m, dtype, true, packed), b = run_layer(m, dtype, false, packed);
        // fp32: TF32 is off in tests, so only summation order differs; bf16: one rounding apart per
        // op.
        const double bound = dtype == at::kFloat ? 1e-5 : 2e-2;
        EXPECT_LT(rel(a.out, b.out), bound) << where;
        EXPECT_LT(rel(a.dx, b.dx), bound) << where;
        ASSERT_EQ(a.grads.size(), b.grads.size()) << where;
        for (const auto& [name, g] : b.grads)
          EXPECT_LT(rel(a.grads.at(name), g), bound) << where << " " << name;
      }
#endif
}

namespace {
std::vector<nlohmann::json> train_steps(const std::string& dtype, bool fused) {
  return train_at_world_one("gpu_fused_" + dtype + (fused ? "_on" : "_off"),
                            "--model tiny --threads 2 --data " + test_work() +
                                "/demo/train.h5 --steps 3 --batch-size 8 --param-dtype " + dtype +
                                " --lr 3e-3 --no-tf32 --device cuda" +
                                (fused ? " --fused-layers" : ""));
}
}  // namespace

TEST(GpuFusedLayer, ThreeTrainingStepsMatchComposite) {
  SKIP_WITHOUT_GPU();
  for (const std::string dtype : {"fp32", "bf16"}) {
    const auto on = train_steps(dtype, true), off = train_steps(dtype, false);
    ASSERT_EQ(on.size(), 3u) << dtype;
    ASSERT_EQ(off.size(), 3u) << dtype;
    for (size_t i = 0; i < on.size(); ++i) {
      const double a = on[i]["loss"], b = off[i]["loss"];
      EXPECT_NEAR(a, b, (dtype == "fp32" ? 1e-4 : 1e-2) * std::abs(b))
          << dtype << " step " << i + 1;
      const double ga = on[i]["grad_norm"], gb = off[i]["grad_norm"];
      EXPECT_NEAR(ga, gb, (dtype == "fp32" ? 1e-3 : 3e-2) * std::abs(gb))
          << dtype << " step " << i + 1;
    }
  }
}
