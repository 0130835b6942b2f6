// DPO's summed answer log-probabilities: the chunked head (logits a chunk of tokens at a time,
// recomputed in backward) against LibTorch's composite ops on the whole logits, value and both
// gradients, for chunks that cut rows and for labels already aligned.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "shardtrain/model/preference_loss.h"

using namespace shardtrain;

namespace {

void expect_close(const at::Tensor& a, const at::Tensor& b, const char* what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  const double gap = (a - b).abs().max().item<double>();
  EXPECT_LE(gap, 1e-5 * std::max(1.0, b.abs().max().item<double>())) << what << ": gap " << gap;
}

}  // namespace

TEST(PreferenceLoss, ChunkedRowLogpsEqualTheWholeLogitsValueAndGradients) {
  at::manual_seed(3);
  const int64_t B = 4, T = 9, H = 6, V = 13;
  at::Tensor labels = at::randint(0, V, {B, T}, at::kLong);
  labels.index_put_({0, at::indexing::Slice(0, 4)}, -100);  // a masked prompt
  labels.index_put_({3, at::indexing::Slice(6, T)}, -100);  // padding
  const at::Tensor w_row = at::randn({B});                  // a different gradient for every row
  for (bool aligned : {false, true}) {
    for (int64_t chunk : {1, 5, 7, 64}) {
      const at::Tensor h0 = at::randn({B, T, H}), w0 = at::randn({V, H});
      at::Tensor h1 = h0.clone().requires_grad_(), w1 = w0.clone().requires_grad_();
      at::Tensor h2 = h0.clone().requires_grad_(), w2 = w0.clone().requires_grad_();
      const at::Tensor ours = model::chunked_row_logps(h1, w1, labels, chunk, aligned);
      const at::Tensor ref = model::row_logps(at::linear(h2, w2), labels, aligned);
      expect_close(ours, ref, "the rows' log-probabilities");
      (ours * w_row).sum().backward();
      (ref * w_row).sum().backward();
      expect_close(h1.grad(), h2.grad(), "d/d hidden");
      expect_close(w1.grad(), w2.grad(), "d/d lm_head");
      EXPECT_GT(w1.grad().abs().sum().item<double>(), 0) << "the gradient reaches lm_head";
    }
  }
}

TEST(PreferenceLoss, SigmoidLossIsTrlsOnHandMadeLogProbabilities) {
  // Pair 0: policy favours chosen by 2 nats over the reference; pair 1: rejected by 1.
  const at::Tensor policy = at::tensor({-10.0, -12.0, -8.0, -7.0});
  const at::Tensor reference = at::tensor({-11.0, -11.0, -8.0, -8.0});
  const at::Tensor tokens = at::tensor({4, 5, 2, 2});
  model::PreferenceConfig cfg;
  cfg.beta = 0.5;
  const auto t = model::preference_loss(policy, reference, tokens, cfg);
  // -log sigmoid(beta * ((pc - rc) - (pr - rr))): (1 - (-1)) = 2 and (0 - 1) = -1.
  EXPECT_NEAR(t.losses[0].item<double>(), std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(t.losses[1].item<double>(), std::log1p(std::exp(0.5)), 1e-6);
  const auto m = model::preference_metrics(t.stats);
  EXPECT_EQ(m.pairs, 2);
  EXPECT_NEAR(m.values[0], 0.5 * (0.5 * 1 + 0.5 * 0), 1e-9);   // rewards/chosen
  EXPECT_NEAR(m.values[1], 0.5 * (0.5 * -1 + 0.5 * 1), 1e-9);  // rewards/rejected
  EXPECT_NEAR(m.values[2], 0.5, 1e-9);                         // rewards/accuracies
  EXPECT_NEAR(m.values[4], -9.0, 1e-9);                        // logps/chosen
  cfg.loss = model::PreferenceLossType::kIpo;
  const auto ipo = model::preference_loss(policy, reference, tokens, cfg);
  // ((1/4 - (-1)/5) - 1/(2 beta))^2 = (0.45 - 1)^2
  EXPECT_NEAR(ipo.losses[0].item<double>(), 0.3025, 1e-6);
}
