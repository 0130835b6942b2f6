// LoRA dropout's masks on CPU: pinned to what PyTorch draws for the same seed, reproducible for a
// seed whatever else has drawn random numbers, and the same mask in every compute dtype.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "shardtrain/model/lora.h"

using namespace shardtrain;

namespace {
std::vector<int64_t> dropped(const at::Tensor& y) {
  const at::Tensor idx = y.flatten().eq(0).nonzero().flatten().to(at::kLong).contiguous();
  return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + idx.numel());
}
}  // namespace

// The reference: PyTorch 2.11 in Python,
//   torch.empty(64).bernoulli_(0.7, generator=torch.Generator().manual_seed(seed))
// whose zeros are the dropped positions. A 64-bit seed like the per-pass ones is included.
TEST(LoraDropout, CpuMasksForASeedArePinnedToPyTorchsDraws) {
  const double p = 0.3;
  const auto x = at::ones({64});
  const auto y17 = model::lora_dropout(x, p, 17);
  EXPECT_EQ(dropped(y17),
            std::vector<int64_t>({4, 7, 9, 10, 11, 14, 16, 17, 20, 21, 25, 40, 45, 51}));
  const auto ybig = model::lora_dropout(x, p, 0x9E3779B97F4A7C15ull);
  EXPECT_EQ(dropped(ybig),
            std::vector<int64_t>({2, 4, 8, 11, 21, 26, 27, 36, 38, 42, 43, 49, 54, 61}));
  // The kept values are scaled by 1/(1-p) in fp32, as before.
  EXPECT_EQ(y17.max().item<float>(), static_cast<float>(1.0f / static_cast<float>(1.0 - p)));
}

TEST(LoraDropout, MasksAreReproducibleForASeedWhateverElseDraws) {
  const auto x = at::randn({16, 33});
  const auto first = model::lora_dropout(x, 0.2, 12345);
  at::manual_seed(99);  // the global generator moves: the mask has its own
  (void)at::rand({1000});
  EXPECT_TRUE(first.equal(model::lora_dropout(x, 0.2, 12345)));
  EXPECT_FALSE(first.equal(model::lora_dropout(x, 0.2, 12346)));
}

TEST(LoraDropout, TheMaskIsTheSameInEveryComputeDtype) {
  const auto x = at::ones({4, 100});
  const auto fp32 = model::lora_dropout(x, 0.5, 7);
  for (auto dtype : {at::kBFloat16, at::kHalf, at::kDouble}) {
    const auto y = model::lora_dropout(x.to(dtype), 0.5, 7);
    EXPECT_EQ(y.scalar_type(), dtype);
    EXPECT_EQ(dropped(y), dropped(fp32)) << c10::toString(dtype);
    EXPECT_TRUE(y.to(at::kFloat).equal(fp32)) << "1/(1-p) = 2 is exact in every dtype";
  }
}
