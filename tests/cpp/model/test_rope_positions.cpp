// RoPE at positions in the thousands against transformers' own forward with position_ids
// (tests/python/rope_reference.py): single and packed rows of 8192 tokens, and the llama3, linear
// and dynamic rope_scaling kinds past the contexts where they matter.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cstdio>

#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/config.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/params.h"
#include "test_paths.h"

using namespace shardtrain;

namespace {
const std::string kRef = std::string(SHARDTRAIN_REF_DIR) + "/rope/";

void expect_transformers_logits(const std::string& name) {
  const std::string dir = kRef + name;
  const model::ModelConfig cfg = model::resolve_model(dir + "/model/config.json");
  io::SafetensorsFile ref(dir + "/reference.safetensors");
  const model::ParamStore params =
      model::ParamStore::load(cfg, io::SafetensorsModel(dir + "/model"));
  const at::Tensor tokens = ref.read("tokens");
  const at::Tensor positions = ref.read("positions");
  const int64_t T = tokens.size(1);
  c10::NoGradGuard ng;
  // Tables over the row's positions: dynamic grows its base from them past max_position_embeddings,
  // as transformers does.
  const model::Rotary rope(cfg, T);
  const auto w = [&params](const std::string& n) { return params.get(n); };
  const at::Tensor logits =
      model::llama_forward(cfg, w, tokens, rope, at::kFloat, nullptr, positions);
  const at::Tensor want = ref.read("logits");
  ASSERT_EQ(logits.sizes(), want.sizes());
  const double diff = (logits - want).abs().max().item<double>();
  const double gap = ref.read("fp64_gap").item<double>();
  std::printf("%s: max |logits - transformers'| %.2e, transformers fp32 vs fp64 %.2e\n",
              name.c_str(), diff, gap);
  // Tolerance: a quarter of what transformers' fp32 misses fp64 by here (gap, 0.6-2.0e-5):
  // shardtrain computes the same fp32 angles p * inv_freq (equal bit for bit on CPU), while
  // positions off by one land 1-1.6 gaps away, as RoPE is relative and only fp32's rounding,
  // growing with p, sees them.
  EXPECT_LE(diff, gap / 4) << name << ": max |logits - transformers'| at positions up to "
                           << positions.max().item<int64_t>() << "; transformers fp32 vs fp64 "
                           << gap;
  EXPECT_GT(gap, 4e-6) << name << ": the positions are far enough for fp32's rounding to show";
}
}  // namespace

TEST(RopePositions, PackedDocumentsRestartTheirPositions) {
  expect_transformers_logits("default_packed");
}
TEST(RopePositions, Llama3ScalingPastItsOriginalContext) {
  expect_transformers_logits("llama3_packed");
}
TEST(RopePositions, LinearScalingPacked) { expect_transformers_logits("linear_packed"); }
// One document of 8192 positions.
TEST(RopePositions, DynamicScalingPastMaxPositions) {
  expect_transformers_logits("dynamic_beyond");
}
