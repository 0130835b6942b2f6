// Parity with Hugging Face transformers (tests/python/make_reference.py): the same weights and
// tokens must give the same logits, loss, gradients and AdamW loss trajectory.
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include "oracle/trainer.h"
#include "shardtrain/io/safetensors.h"
#include "shardtrain/model/generate.h"
#include "shardtrain/model/llama.h"
#include "test_paths.h"

using namespace shardtrain;

namespace {
const std::string kRef = SHARDTRAIN_REF_DIR;

struct Fixture {
  model::ModelConfig cfg = model::resolve_model(kRef + "/model/config.json");
  io::SafetensorsFile ref{kRef + "/reference.safetensors"};
  model::Batch batch{ref.read("tokens"), ref.read("labels")};

  oracle::Trainer trainer() const {
    oracle::TrainConfig tc;
    tc.grad_clip = 1.0;
    tc.adamw = {0.9, 0.95, 1e-8, 0.1};
    io::SafetensorsModel w(kRef + "/model");
    return oracle::Trainer(cfg, tc, model::ParamStore::load(cfg, w));
  }
};
}  // namespace

TEST(HfParity, ConfigIsGroupedQueryAttention) {
  Fixture f;
  EXPECT_EQ(f.cfg.num_heads, 8);
  EXPECT_EQ(f.cfg.num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(f.cfg.rope_theta, 10000.0);
}

TEST(HfParity, LogitsAndLossMatch) {
  Fixture f;
  auto tr = f.trainer();
  c10::NoGradGuard ng;
  auto logits = tr.logits(f.batch.tokens);
  auto ref_logits = f.ref.read("logits");
  ASSERT_EQ(logits.sizes(), ref_logits.sizes());
  const double max_diff = (logits - ref_logits).abs().max().item<double>();
  EXPECT_LE(max_diff, 1e-5) << "max |logits - HF logits|";
  auto ls = model::causal_lm_loss(logits, f.batch.labels);
  const double loss = ls.sum.item<double>() / ls.count;
  EXPECT_NEAR(loss, f.ref.read("loss").item<double>(), 1e-5);
  EXPECT_EQ(ls.count, (16 - 5) + (10 - 1));  // row 0 masks positions 0-4, row 1 positions 10-15
}

TEST(HfParity, EveryGradientMatches) {
  Fixture f;
  auto tr = f.trainer();
  auto ls = model::causal_lm_loss(tr.logits(f.batch.tokens), f.batch.labels);
  (ls.sum / static_cast<double>(ls.count)).backward();
  const auto& specs = tr.params().specs();
  ASSERT_EQ(specs.size(), 2u + 9u * 2u + 1u);
  for (size_t i = 0; i < specs.size(); ++i) {
    auto g = tr.params().tensors()[i].grad();
    auto ref = f.ref.read("grad." + specs[i].name);
    ASSERT_TRUE(g.defined()) << specs[i].name;
    // Relative to the tensor's scale: elementwise relative error is meaningless near zero.
    const double rel = (g - ref).norm().item<double>() / ref.norm().item<double>();
    const double max_rel = (g - ref).abs().max().item<double>() / ref.abs().max().item<double>();
    EXPECT_LE(rel, 1e-4) << specs[i].name;
    EXPECT_LE(max_rel, 1e-4) << specs[i].name;
  }
}

TEST(HfParity, AdamWTrajectoryMatchesTorchOptim) {
  Fixture f;
  auto tr = f.trainer();
  auto ref = f.ref.read("adamw_losses");
  ASSERT_EQ(ref.numel(), 10);
  for (int64_t s = 0; s < 10; ++s) {
    const auto r = tr.step({f.batch}, 1e-3);
    EXPECT_NEAR(r.loss, ref[s].item<double>(), 1e-5) << "step " << s;
  }
  EXPECT_LT(ref[9].item<double>(), ref[0].item<double>());
}

// The optimizer component against torch.optim.AdamW(fused=True) on the same gradients: the same
// kernel, so the parameters and both moments agree to float rounding.
TEST(HfParity, FusedAdamWEqualsTorchFused) {
  Fixture f;
  optim::OptimizerConfig cfg;
  cfg.adamw = {0.9, 0.95, 1e-8, 0.1};
  cfg.grad_clip = 0;  // torch's step alone
  optim::Optimizer opt(cfg);
  std::vector<at::Tensor> params;
  for (int i = 0; i < 3; ++i) {
    params.push_back(f.ref.read("fused.init." + std::to_string(i)).clone());
    opt.add(params.back(), /*decay=*/i != 1);
  }
  for (int step = 0; step < 5; ++step) {
    std::vector<at::Tensor> grads;
    for (int i = 0; i < 3; ++i)
      grads.push_back(f.ref.read("fused.grad." + std::to_string(step) + "." + std::to_string(i)));
    opt.step(2e-2, grads);
  }
  for (int i = 0; i < 3; ++i) {
    const auto n = std::to_string(i);
    EXPECT_LE((params[i] - f.ref.read("fused.final." + n)).abs().max().item<double>(), 1e-6) << i;
    EXPECT_LE((opt.adamw().slots()[i].exp_avg - f.ref.read("fused.exp_avg." + n))
                  .abs()
                  .max()
                  .item<double>(),
              1e-7)
        << i;
    EXPECT_LE((opt.adamw().slots()[i].exp_avg_sq - f.ref.read("fused.exp_avg_sq." + n))
                  .abs()
                  .max()
                  .item<double>(),
              1e-7)
        << i;
    EXPECT_GT((params[i] - f.ref.read("fused.init." + n)).abs().max().item<double>(), 1e-3)
        << "the steps moved it";
  }
}

TEST(HfParity, GreedyGenerationMatchesGenerate) {
  Fixture f;
  auto tr = f.trainer();
  const auto prompt_t = f.ref.read("generate.prompt").to(at::kInt).flatten();
  std::vector<int32_t> prompt(prompt_t.data_ptr<int32_t>(),
                              prompt_t.data_ptr<int32_t>() + prompt_t.numel());
  model::GenerateConfig g;
  g.max_new_tokens = 12;
  g.stop_ids = {2};
  g.max_context = f.cfg.max_position_embeddings;
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : tr.params().named()) w[name] = t;
  const model::Decoder decoder(f.cfg, w, {}, {}, at::kCPU, at::kFloat);
  const auto got = model::generate(decoder, {prompt}, {0}, g).front().ids;
  const auto want_t = f.ref.read("generate.greedy").to(at::kInt).flatten();
  std::vector<int32_t> want(want_t.data_ptr<int32_t>(),
                            want_t.data_ptr<int32_t>() + want_t.numel());
  EXPECT_EQ(got, want);
}

TEST(HfParity, TopPKeepsWhatTopPLogitsWarperKeeps) {
  Fixture f;
  const auto logits = f.ref.read("topp.logits");
  for (const char* p : {"0.3", "0.8", "0.95"}) {
    const auto kept = model::top_p_filter(logits, std::stod(p)).isfinite();
    const auto want = f.ref.read(std::string("topp.keep_") + p).to(at::kBool);
    EXPECT_TRUE(kept.equal(want)) << "top_p " << p << ": kept " << kept.sum().item<int64_t>()
                                  << ", HF kept " << want.sum().item<int64_t>();
  }
  EXPECT_TRUE(model::top_p_filter(logits, 1.0).equal(logits));
}
