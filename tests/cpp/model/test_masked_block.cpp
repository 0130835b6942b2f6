// A ring block's path (model/masked_block.h) on the CPU: which kernel a block takes, the math
// path's span sizes, and the memory-efficient kernel's inputs — the additive mask, padded and
// with its empty rows opened, fed to PyTorch's own SDPA (its math backend here, the kernel on a
// GPU) — against the math path's block_attention on document and sliding-window masks.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shardtrain/model/masked_block.h"
#include "shardtrain/model/ring_attention.h"

using namespace shardtrain;
using model::BlockPath;

TEST(MaskedBlock, EachBlockTakesTheKernelThatReadsItsMask) {
  EXPECT_EQ(model::block_path(false, at::kBFloat16, false, 128), BlockPath::kMath) << "a CPU";
  EXPECT_EQ(model::block_path(true, at::kBFloat16, false, 128), BlockPath::kFlash);
  EXPECT_EQ(model::block_path(true, at::kBFloat16, true, 128), BlockPath::kMasked)
      << "documents or a window: a kernel, not the math path";
  EXPECT_EQ(model::block_path(true, at::kHalf, true, 64), BlockPath::kMasked);
  EXPECT_EQ(model::block_path(true, at::kFloat, true, 128), BlockPath::kMasked);
  EXPECT_EQ(model::block_path(true, at::kFloat, false, 128), BlockPath::kMath)
      << "no mask to read: no all-true mask is made for the kernel";
  EXPECT_EQ(model::block_path(true, at::kBFloat16, true, 100), BlockPath::kMath)
      << "a head size the kernel cannot read in 16-byte vectors";
}

// An 8B layer's block at 8,192 tokens over 2 ranks (32 heads, 4,096 keys): on a GPU the math
// path takes hundreds of rows a launch (16 rows before, 512 spans a block); a CPU keeps its
// scores cache-sized.
TEST(MaskedBlock, MathSpansAreSizedForTheDevice) {
  EXPECT_GE(model::math_span_rows(1, 32, 4096, /*cuda=*/true), 256);
  EXPECT_EQ(model::math_span_rows(1, 32, 4096, /*cuda=*/false), 16);
  EXPECT_EQ(model::math_span_rows(1, 2, 64, false), (int64_t{1} << 18) / 128);
}

TEST(MaskedBlock, TheAdditiveMaskIsPaddedAndOpensOnlyEmptyRows) {
  at::Tensor keys = at::rand({2, 1, 5, 21}).gt(0.5);
  keys.select(2, 3).fill_(false);  // a row that sees no key
  keys.select(2, 0).select(1, 0).fill_(true);
  for (bool open : {false, true}) {
    const at::Tensor bias = model::additive_mask(keys, at::kBFloat16, 2, 4, open);
    EXPECT_EQ(bias.sizes(), (at::IntArrayRef{2, 4, 5, 21}));
    EXPECT_EQ(bias.scalar_type(), at::kBFloat16);
    EXPECT_EQ(bias.stride(2) % 16, 0) << "the kernel's rows are 16-element aligned";
    const at::Tensor seen = bias.eq(0), hidden = bias.isneginf();
    EXPECT_TRUE(seen.logical_or(hidden).all().item<bool>()) << "0 or -inf, nothing else";
    at::Tensor want = keys.expand({2, 4, 5, 21});
    if (open) want = want.logical_or(keys.any(-1, true).logical_not().expand({2, 4, 5, 21}));
    EXPECT_TRUE(seen.equal(want)) << "open " << open;
  }
}

TEST(MaskedBlock, CausalityIsFoldedIntoTheKeys) {
  const at::Tensor all = model::block_keys({}, /*causal=*/true, 4, 4, at::kCPU);
  EXPECT_TRUE(all.squeeze().equal(at::ones({4, 4}, at::kBool).tril()));
  const at::Tensor some = at::rand({1, 1, 4, 4}).gt(0.3);
  EXPECT_TRUE(model::block_keys(some, false, 4, 4, at::kCPU).equal(some));
  EXPECT_TRUE(model::block_keys(some, true, 4, 4, at::kCPU)
                  .equal(some.logical_and(at::ones({4, 4}, at::kBool).tril())));
}

// The kernel's inputs, run through SDPA with the same additive mask, give the math path's output
// and log-sum-exp: documents (a packed row) and a sliding window, GQA, a row with no key blanked.
TEST(MaskedBlock, KernelInputsGiveTheMathPathsBlock) {
  at::manual_seed(3);
  const int64_t B = 2, nh = 4, nkv = 2, L = 24, D = 16, window = 7;
  const at::Tensor q = at::randn({B, nh, L, D}), k = at::randn({B, nkv, L, D});
  const at::Tensor v = at::randn({B, nkv, L, D});
  const at::Tensor pos = at::arange(L);
  const at::Tensor doc =
      at::tensor({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2})
          .unsqueeze(0)
          .repeat({B, 1});
  const at::Tensor back = pos.unsqueeze(1) - pos.unsqueeze(0);
  at::Tensor mask = back.lt(window).unsqueeze(0).logical_and(
      doc.unsqueeze(2).eq(doc.unsqueeze(1)));  // [B, L, L]; causality from `causal`
  mask = mask.unsqueeze(1);
  mask.select(0, 1).select(1, 9).fill_(false);  // row 9 of batch 1 sees no key
  const auto ref = model::block_attention(q, k, v, mask, /*causal=*/true, BlockPath::kMath);
  const at::Tensor keys = model::block_keys(mask, true, L, L, at::kCPU);
  const at::Tensor bias = model::additive_mask(keys, at::kFloat, B, nh, /*open_empty_rows=*/true);
  const at::Tensor kr = k.repeat_interleave(nh / nkv, 1), vr = v.repeat_interleave(nh / nkv, 1);
  at::Tensor out = at::scaled_dot_product_attention(q, kr, vr, bias);
  const at::Tensor none = keys.any(-1).logical_not();
  out.masked_fill_(none.unsqueeze(-1), 0.0);
  EXPECT_TRUE(at::allclose(out, ref.out, 1e-5, 1e-5));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor lse = at::logsumexp(at::matmul(q, kr.transpose(-2, -1)).mul_(scale) + bias, -1);
  lse.masked_fill_(none, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(at::allclose(lse, ref.lse, 1e-5, 1e-5));
  EXPECT_TRUE(ref.lse[1][0][9].isneginf().item<bool>());
  EXPECT_TRUE(ref.out[1][0][9].eq(0).all().item<bool>());
}
