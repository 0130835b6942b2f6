// Batched decoding's sampling: the first token of 4,000 rows, each from its own seed, is drawn
// from softmax(logits / T) after top-k and top-p (a chi-square test against the distribution the
// model's own logits give), and the cache's mask keeps padding and the future out of reach.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "shardtrain/model/generate.h"
#include "shardtrain/model/kv_cache.h"
#include "shardtrain/model/params.h"

using namespace shardtrain;

TEST(Generate, SampledFirstTokensFollowTheWarpedSoftmax) {
  const model::ModelConfig cfg = model::model_preset("tiny");
  const model::ParamStore p = model::ParamStore::initialize(cfg, 3);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : p.named()) w[name] = t;
  const model::Decoder decoder(cfg, w, {}, {}, at::kCPU, at::kFloat);
  model::GenerateConfig g;
  g.max_new_tokens = 1;
  g.temperature = 0.7;
  g.top_k = 40;
  g.top_p = 0.9;
  g.stop_ids = {};
  g.batch = 1000;
  const std::vector<int32_t> prompt = {1, 17, 42, 9};
  const int n = 4000;
  std::vector<uint64_t> seeds;
  for (int i = 0; i < n; ++i) seeds.push_back(model::row_seed(11, static_cast<uint64_t>(i)));
  const auto out = model::generate(decoder, std::vector<std::vector<int32_t>>(n, prompt), seeds, g);
  // The distribution: the prompt's last logits from one step, warped.
  model::KvCache cache = decoder.cache(1, 4);
  const at::Tensor logits = decoder.step(at::tensor({1L, 17L, 42L, 9L}).view({1, 4}),
                                         at::arange(4).view({1, 4}), cache)[0][3];
  const at::Tensor probs = model::sampling_probs(logits, g);
  std::vector<double> seen(static_cast<size_t>(cfg.vocab_size), 0);
  for (const auto& c : out) {
    ASSERT_EQ(c.ids.size(), 1u);
    seen[static_cast<size_t>(c.ids[0])] += 1;
  }
  // Pearson's chi-square over the kept tokens, those expected fewer than 5 times pooled.
  double chi = 0, pooled_seen = 0, pooled_expected = 0;
  int cells = 0;
  for (int64_t v = 0; v < cfg.vocab_size; ++v) {
    const double e = probs[v].item<double>() * n;
    if (e == 0) {
      EXPECT_EQ(seen[static_cast<size_t>(v)], 0) << "token " << v << " was filtered out";
      continue;
    }
    if (e < 5) {
      pooled_seen += seen[static_cast<size_t>(v)];
      pooled_expected += e;
      continue;
    }
    chi += std::pow(seen[static_cast<size_t>(v)] - e, 2) / e;
    ++cells;
  }
  if (pooled_expected > 0) {
    chi += std::pow(pooled_seen - pooled_expected, 2) / pooled_expected;
    ++cells;
  }
  ASSERT_GE(cells, 5) << "too few tokens kept for the test to mean anything";
  // The 0.999 quantile of chi-square with k = cells - 1 degrees of freedom (Wilson-Hilferty).
  const double k = cells - 1, z = 3.090;
  const double limit = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
  EXPECT_LT(chi, limit) << cells << " cells";
}

namespace {
at::Tensor bits(std::vector<int64_t> v) { return at::tensor(v, at::kLong).to(at::kBool); }
}  // namespace

TEST(Generate, CacheMaskHidesPaddingTheFutureAndWhatIsPastTheWindow) {
  // Row 0: two padding slots, then positions 0..2; row 1: positions 0..4. The step: the last 2.
  const at::Tensor slots = at::tensor({-1L, -1L, 0L, 1L, 2L, 0L, 1L, 2L, 3L, 4L}).view({2, 5});
  const at::Tensor step = at::tensor({1L, 2L, 3L, 4L}).view({2, 2});
  const at::Tensor m = model::cache_mask(slots, step, 0);
  EXPECT_EQ(m.sizes(), (std::vector<int64_t>{2, 1, 2, 5}));
  EXPECT_TRUE(m[0][0][0].equal(bits({0, 0, 1, 1, 0})));
  EXPECT_TRUE(m[0][0][1].equal(bits({0, 0, 1, 1, 1})));
  const at::Tensor w = model::cache_mask(slots, step, 2);  // a window of 2: itself and one back
  EXPECT_TRUE(w[1][0][1].equal(bits({0, 0, 0, 1, 1})));
  // A padding query sees its own slot only.
  const at::Tensor pad = model::cache_mask(slots, at::tensor({-1L, 0L, 3L, 4L}).view({2, 2}), 0);
  EXPECT_TRUE(pad[0][0][0].equal(bits({0, 0, 0, 1, 0})));
}
