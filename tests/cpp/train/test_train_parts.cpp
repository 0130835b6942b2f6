// Training parts on one rank: learning-rate schedules (an unknown kind refused), and the oracle
// trainer's gradient accumulation, bf16 compute and clipping against plain arithmetic.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "oracle/trainer.h"
#include "shardtrain/optim/lr_schedule.h"
#include "shardtrain/runtime/error.h"

using namespace shardtrain;

TEST(LrSchedule, WarmupThenCosineToFloor) {
  optim::LrSchedule s;
  s.base_lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 104;
  s.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(s.at(0, 0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3, 0), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4, 0), 1.0);
  EXPECT_NEAR(s.at(54, 0), 0.55, 1e-12);  // halfway: floor + half the span
  EXPECT_NEAR(s.at(104, 0), 0.1, 1e-12);
  // A resume at half the global batch steps half a reference step at a time, between the two.
  EXPECT_DOUBLE_EQ(s.at(1.5, 0), 2.5 / 4);
  EXPECT_GT(s.at(54.5, 0), s.at(55, 0));
  EXPECT_LT(s.at(54.5, 0), s.at(54, 0));
}

TEST(LrSchedule, AnUnknownKindIsRefusedNotTakenForCosine) {
  optim::LrSchedule s;
  s.kind = "linear";
  EXPECT_THROW(s.validate(), runtime::UsageError);
  EXPECT_THROW(s.at(5, 0), runtime::UsageError);
  s.kind = "constant";
  s.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(s.at(5, 0), s.base_lr);
}

TEST(LrSchedule, StepLrPerEpoch) {
  optim::LrSchedule s;
  s.kind = "steplr";
  s.base_lr = 1e-4;
  EXPECT_DOUBLE_EQ(s.at(0, 0), 1e-4);
  EXPECT_NEAR(s.at(500, 2), 1e-4 * 0.85 * 0.85, 1e-18);
}

namespace {
oracle::Trainer tiny_trainer(at::ScalarType dtype = at::kFloat) {
  auto cfg = model::model_preset("tiny");
  oracle::TrainConfig tc;
  tc.param_dtype = dtype;
  return oracle::Trainer(cfg, tc, model::ParamStore::initialize(cfg, 5));
}
// Token ids in the tiny vocabulary, deterministic; labels = tokens (HF convention).
model::Batch synthetic_batch(int64_t rows, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto t = at::randint(3, 512, {rows, 32}, gen, at::kLong);
  return {t, t.clone()};
}
std::vector<model::Batch> split(const model::Batch& b, int64_t parts) {
  std::vector<model::Batch> out;
  const int64_t n = b.tokens.size(0) / parts;
  for (int64_t i = 0; i < parts; ++i)
    out.push_back({b.tokens.narrow(0, i * n, n), b.labels.narrow(0, i * n, n)});
  return out;
}
}  // namespace

TEST(Trainer, GradientAccumulationEqualsOneBigBatch) {
  auto batch = synthetic_batch(4, 1);
  batch.labels.narrow(1, 0, 9).fill_(-100);  // uneven masks across micro-batches
  batch.labels[2].narrow(0, 0, 20).fill_(-100);
  auto big = tiny_trainer(), acc = tiny_trainer();
  for (int s = 0; s < 3; ++s) {
    auto r1 = big.step({batch}, 1e-3);
    auto r4 = acc.step(split(batch, 4), 1e-3);
    EXPECT_NEAR(r1.loss, r4.loss, 1e-6);
    EXPECT_NEAR(r1.grad_norm, r4.grad_norm, 1e-5);
  }
  // Adam divides by sqrt(v): summation-order noise in near-zero gradients grows to ~1e-6.
  for (size_t i = 0; i < big.params().tensors().size(); ++i)
    EXPECT_LE((big.params().tensors()[i] - acc.params().tensors()[i]).abs().max().item<double>(),
              1e-5);
}

TEST(Trainer, Bf16ComputeTracksFp32) {
  auto batch = synthetic_batch(4, 2);
  auto f32 = tiny_trainer(), b16 = tiny_trainer(at::kBFloat16);
  for (int s = 0; s < 5; ++s) {
    auto a = f32.step({batch}, 1e-3), b = b16.step({batch}, 1e-3);
    EXPECT_NEAR(a.loss, b.loss, 0.02 * a.loss) << "step " << s;  // bf16 has ~3 significant digits
  }
  EXPECT_EQ(b16.params().tensors()[0].scalar_type(), at::kFloat);  // master weights stay fp32
}

TEST(Trainer, ClippingBoundsTheUpdateNorm) {
  std::vector<at::Tensor> g = {at::full({4}, 3.0), at::full({2}, 4.0)};
  const at::Tensor n = optim::grad_sq_norm(g, at::kCPU).sqrt();
  EXPECT_NEAR(n.item<double>(), std::sqrt(4 * 9.0 + 2 * 16.0),
              1e-6 * n.item<double>());  // fp32 per-tensor norms (foreach kernel)
  optim::scale_grads(g, n, 1.0);
  EXPECT_NEAR(std::sqrt(optim::grad_sq_norm(g, at::kCPU).item<double>()), 1.0, 1e-5);
  const std::vector<at::Tensor> small = {at::full({3}, 0.25)};
  optim::scale_grads(small, optim::grad_sq_norm(small, at::kCPU).sqrt(), 1.0);
  EXPECT_TRUE(small[0].equal(at::full({3}, 0.25)))
      << "a norm below the limit leaves the gradients as they are";
}

// Clipping folded into the fused AdamW (the GPU path: grad_scale, a divisor) against
// clip_grad_norm_'s multiply then AdamW (the CPU path): the same step within an fp32 ulp or two,
// and a norm under the limit gives a divisor of exactly 1 (the same bits).
TEST(Trainer, ClippingFoldedIntoAdamWMatchesClipThenStep) {
  at::manual_seed(11);  // the same draws however ctest orders the tests
  for (const double max_norm : {1.0, 1e6}) {
    const at::Tensor g0 = at::randn({4096}, at::TensorOptions().dtype(at::kFloat)) * 3;
    const at::Tensor start = at::randn({4096});
    auto run = [&](bool folded) {
      optim::AdamW adamw(optim::AdamWConfig{});
      at::Tensor p = start.clone();
      adamw.add(p, true);
      std::vector<at::Tensor> g = {g0.clone()};
      const at::Tensor norm = optim::grad_sq_norm(g, at::kCPU).sqrt();
      if (folded) {
        adamw.step(1e-2, g, {}, optim::clip_divisor(norm, max_norm, at::kCPU));
      } else {
        optim::scale_grads(g, norm, max_norm);
        adamw.step(1e-2, g);
      }
      return std::make_pair(p, adamw.slots()[0].exp_avg);
    };
    const auto [p_comp, m_comp] = run(false);
    const auto [p_fold, m_fold] = run(true);
    ASSERT_FALSE(p_comp.equal(start));
    if (max_norm > 1e5) {
      EXPECT_TRUE(p_fold.equal(p_comp))
          << "no clipping: the divisor 1 must leave the step bit for bit";
      EXPECT_TRUE(m_fold.equal(m_comp));
    } else {
      // atol: where the update cancels the parameter (both about lr), an ulp of lr remains.
      EXPECT_TRUE(p_fold.allclose(p_comp, 2.5e-7, 4e-9))
          << (p_fold - p_comp).abs().max().item<float>();
      EXPECT_TRUE(m_fold.allclose(m_comp, 2.5e-7, 1e-12))
          << (m_fold - m_comp).abs().max().item<float>();
      EXPECT_FALSE(m_fold.allclose(m_comp * 1.001, 1e-6, 0))
          << "the clip did not reach the moments";
    }
  }
}

// A skipped step (the non-finite guard's verdict, on the device) changes nothing, the step count
// included; the next applied step equals a run that never saw the skipped one.
TEST(Trainer, ASkippedStepLeavesTheOptimizerAsItWas) {
  auto run = [](bool with_skip) {
    optim::Optimizer opt(optim::OptimizerConfig{});
    at::Tensor p = at::full({4}, 1.0);
    opt.add(p, true);
    const std::vector<at::Tensor> g = {at::full({4}, 0.5)};
    opt.apply(1e-2, g, opt.grad_norm(g), at::zeros({}));
    if (with_skip) opt.apply(1e-2, {at::full({4}, 7.0)}, opt.grad_norm(g), at::ones({}));
    opt.apply(1e-2, g, opt.grad_norm(g), at::zeros({}));
    return std::make_pair(p.clone(), opt.adamw().step_count());
  };
  const auto [skipped, skipped_steps] = run(true);
  const auto [plain, plain_steps] = run(false);
  EXPECT_TRUE(skipped.equal(plain));
  EXPECT_EQ(skipped_steps, 2);
  EXPECT_EQ(plain_steps, 2);
}
