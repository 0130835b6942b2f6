// LoRA's pure parts: option validation, names and shapes, PEFT's init, dropout's statistics
// and determinism, and the merged weight against the unmerged forward.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "shardtrain/model/lora.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

TEST(LoraUnits, BadOptionsNameTheOption) {
  auto expect_usage = [](model::LoraConfig c, const std::string& opt) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted a bad " << opt;
    } catch (const runtime::UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(opt), std::string::npos) << e.what();
    }
  };
  model::LoraConfig c;
  c.rank = -1;
  expect_usage(c, "--lora-rank");
  c.rank = 8;
  c.dropout = 1.0;
  expect_usage(c, "--lora-dropout");
  c.dropout = -0.1;
  expect_usage(c, "--lora-dropout");
  c.dropout = 0;
  c.targets = {"q_proj", "w_proj"};
  expect_usage(c, "--lora-targets");
  EXPECT_THROW(model::parse_lora_targets("q_proj,lm_head"), runtime::UsageError);
  EXPECT_THROW(model::parse_lora_targets("q_proj,q_proj"), runtime::UsageError);
  EXPECT_EQ(model::parse_lora_targets("v_proj,down_proj"),
            (std::vector<std::string>{"v_proj", "down_proj"}));
  model::LoraConfig off;  // rank 0 is off, and its other settings are still checked
  EXPECT_NO_THROW(off.validate());
  off.dropout = 5;
  expect_usage(off, "--lora-dropout");
}

TEST(LoraUnits, SpecsHavePeftShapesAndNames) {
  model::ModelConfig m = model::model_preset("tiny");
  model::LoraConfig l;
  l.rank = 8;
  l.targets = {"k_proj", "down_proj"};
  const auto s = model::lora_param_specs(m, l);
  ASSERT_EQ(s.size(), static_cast<size_t>(4 * m.num_layers));
  EXPECT_EQ(s[0].name, "model.layers.0.self_attn.k_proj.lora_A.weight");
  EXPECT_EQ(s[0].shape, (std::vector<int64_t>{8, m.hidden_size}));
  EXPECT_EQ(s[1].shape, (std::vector<int64_t>{m.num_kv_heads * m.head_dim(), 8}));
  EXPECT_EQ(s[2].shape, (std::vector<int64_t>{8, m.intermediate_size}));  // down_proj's A reads F
  EXPECT_EQ(s[3].shape, (std::vector<int64_t>{m.hidden_size, 8}));
  EXPECT_EQ(s[0].unit, 1);
  EXPECT_EQ(s.back().unit, m.num_layers);
  EXPECT_EQ(model::peft_key(s[0].name),
            "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight");
}

TEST(LoraUnits, InitIsPeftsKaimingUniformAndZeroB) {
  model::ParamSpec a{"model.layers.0.self_attn.q_proj.lora_A.weight", {16, 400}, false, 1};
  model::ParamSpec b{"model.layers.0.self_attn.q_proj.lora_B.weight", {64, 16}, false, 1};
  const auto ta = model::init_lora_param(a, 3);
  EXPECT_LE(ta.abs().max().item<double>(), 1.0 / 20);  // bound 1/sqrt(in)
  EXPECT_GT(ta.abs().max().item<double>(), 0.9 / 20);
  EXPECT_NEAR(ta.std().item<double>(), (1.0 / 20) / std::sqrt(3.0),
              1e-3);  // U(-b, b) has std b/sqrt(3)
  EXPECT_TRUE(ta.equal(model::init_lora_param(a, 3)));
  EXPECT_FALSE(ta.equal(model::init_lora_param(a, 4)));
  EXPECT_EQ(model::init_lora_param(b, 3).abs().max().item<double>(), 0.0);
}

TEST(LoraUnits, DropoutStatistics) {
  const double p = 0.3;
  const auto x = at::ones({200, 500});
  const auto y = model::lora_dropout(x, p, 17);
  const double dropped = y.eq(0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, p, 0.005);  // 100k draws: the standard error is 0.0014
  EXPECT_NEAR(y.mean().item<double>(), 1.0, 0.01) << "inverted dropout keeps the expectation";
  EXPECT_NEAR(y.max().item<double>(), 1.0 / (1 - p), 1e-6);
  EXPECT_TRUE(y.equal(model::lora_dropout(x, p, 17))) << "the seed alone decides the mask";
  EXPECT_FALSE(y.equal(model::lora_dropout(x, p, 18)));
  EXPECT_TRUE(model::lora_dropout(x, 0.0, 17).equal(x));
}

TEST(LoraUnits, MergedWeightEqualsTheAdapterForward) {
  auto x = at::randn({3, 5, 12}), w = at::randn({7, 12}), a = at::randn({4, 12}),
       b = at::randn({7, 4});
  const auto unmerged = model::lora_linear(x, w, a, b, 2.5, x);
  const auto merged = at::linear(x, model::merge_lora(w, a, b, 2.5));
  EXPECT_LE((unmerged - merged).abs().max().item<double>(), 1e-4);
  EXPECT_GT((unmerged - at::linear(x, w)).abs().max().item<double>(), 1e-2);
}
