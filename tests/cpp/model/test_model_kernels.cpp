// Faster paths of the model against the plain ones they replace: same values, same gradients.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "shardtrain/model/llama.h"
#include "shardtrain/model/lm_loss.h"

using namespace shardtrain;

namespace {
struct Grads {
  at::Tensor out, dq, dk, dv;
};
Grads attention_grads(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0,
                      bool native) {
  auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
       v = v0.clone().requires_grad_();
  auto out = model::causal_attention(q, k, v, native);
  (out.to(at::kFloat) * at::linspace(-1, 1, out.numel()).view(out.sizes())).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
}  // namespace

// SDPA's enable_gqa against K and V repeated per query head (Hugging Face's repeat_kv).
TEST(ModelKernels, NativeGroupedQueryAttentionEqualsRepeatedKv) {
  at::manual_seed(3);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opt = at::TensorOptions().dtype(dtype);
    auto q = at::randn({2, 8, 33, 16}, opt), k = at::randn({2, 2, 33, 16}, opt),
         v = at::randn({2, 2, 33, 16}, opt);
    const auto a = attention_grads(q, k, v, true), b = attention_grads(q, k, v, false);
    const double tol = dtype == at::kFloat ? 1e-6 : 2e-2;
    EXPECT_TRUE(at::allclose(a.out.to(at::kFloat), b.out.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_TRUE(at::allclose(a.dq.to(at::kFloat), b.dq.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_TRUE(at::allclose(a.dk.to(at::kFloat), b.dk.to(at::kFloat), tol, tol))
        << dtype;  // summed over the 4 query heads
    EXPECT_TRUE(at::allclose(a.dv.to(at::kFloat), b.dv.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_EQ(a.dk.sizes(), k.sizes());
  }
  // Multi-head attention (nkv == nh) takes neither path.
  auto q = at::randn({1, 4, 9, 8}), k = at::randn({1, 4, 9, 8}), v = at::randn({1, 4, 9, 8});
  EXPECT_TRUE(
      at::equal(model::causal_attention(q, k, v, true), model::causal_attention(q, k, v, false)));
}

namespace {
struct LossGrads {
  at::Tensor loss, dh, dw;
};
// chunk 0: the unfused head, at::linear then the fp32 cross-entropy.
// hint: the gradient the fused loss prepares for (backward brings 0.37).
LossGrads head_loss(const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& labels,
                    int64_t chunk, double hint = 1) {
  auto h = h0.clone().requires_grad_(), w = w0.clone().requires_grad_();
  auto loss = chunk > 0 ? model::chunked_lm_loss(h, w, labels, chunk, hint)
                        : model::causal_lm_loss(at::linear(h, w), labels, false).sum;
  (loss * 0.37).backward();
  return {loss.detach(), h.grad(), w.grad()};
}
}  // namespace

// The chunked head+loss against the unfused one, at chunk sizes that split rows unevenly.
TEST(ModelKernels, ChunkedLmLossEqualsLinearThenCrossEntropy) {
  at::manual_seed(4);
  const int64_t B = 3, T = 11, H = 16, V = 50;
  auto labels = at::randint(0, V, {B, T}, at::kLong);
  labels.index_put_({0, at::indexing::Slice(0, 4)}, -100);  // a prompt's positions take no loss
  labels.index_put_({2, 7}, -100);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opt = at::TensorOptions().dtype(dtype);
    auto h = at::randn({B, T, H}, opt), w = at::randn({V, H}, opt) * 0.3;
    const auto ref = head_loss(h, w, labels, 0);
    for (const int64_t chunk : {1, 7, 32, 33, 1000}) {
      const auto got =
          head_loss(h, w, labels, chunk, chunk == 7 ? 0.37 : 1.0);  // rescaled, and as prepared
      const double tol = dtype == at::kFloat ? 1e-5 : 1e-2;
      EXPECT_NEAR(got.loss.item<double>(), ref.loss.item<double>(),
                  tol * std::abs(ref.loss.item<double>()))
          << dtype << " chunk " << chunk;
      EXPECT_TRUE(at::allclose(got.dh.to(at::kFloat), ref.dh.to(at::kFloat), tol, tol))
          << dtype << " chunk " << chunk;
      EXPECT_TRUE(at::allclose(got.dw.to(at::kFloat), ref.dw.to(at::kFloat), tol, tol))
          << dtype << " chunk " << chunk;
      EXPECT_EQ(got.dw.scalar_type(), dtype);
    }
  }
}

// A frozen head (LoRA) gets no weight gradient, and the hidden states' gradient is unchanged.
TEST(ModelKernels, ChunkedLmLossWithAFrozenHead) {
  at::manual_seed(5);
  auto labels = at::randint(0, 40, {2, 9}, at::kLong);
  auto h0 = at::randn({2, 9, 8}), w = at::randn({40, 8});
  auto h = h0.clone().requires_grad_();
  model::chunked_lm_loss(h, w, labels, 4).backward();
  const auto ref = head_loss(h0, w, labels, 0);
  EXPECT_TRUE(at::allclose(h.grad(), ref.dh / 0.37, 1e-5, 1e-6));
  EXPECT_FALSE(w.grad().defined());
}

TEST(ModelKernels, LossChunkTokens) {
  EXPECT_EQ(model::loss_chunk_tokens(16384, 32000, 4096, 0),
            2048);  // Llama-2 7B, 4 x 4096 tokens: logits chunk ~ hidden size
  EXPECT_EQ(model::loss_chunk_tokens(65536, 32000, 8192, 0),
            16384);  // 70B: vocab / hidden rounds up to 4
  EXPECT_EQ(model::loss_chunk_tokens(2048, 32000, 256, 0), 256);  // 16 by the rule: the floor
  EXPECT_EQ(model::loss_chunk_tokens(10, 32000, 4096, 0), 10);
  EXPECT_EQ(model::loss_chunk_tokens(100, 512, 64, 1000), 100);
  EXPECT_EQ(model::loss_chunk_tokens(100, 512, 64, 7), 7);
  EXPECT_EQ(model::loss_chunk_tokens(100, 512, 64, -1), 0);
}

// The chunked heads' weight gradient sums every chunk in fp32: no chunk's [V, H] product is
// rounded to bf16 before it is added (as an unchunked GEMM with fp32 accumulation sums). The
// rounding that used to happen per chunk moved the sum by about 2^-9 of a chunk's size.
TEST(ModelKernels, HeadWeightGradSumsBf16ChunksInFp32) {
  at::manual_seed(5);
  const int64_t V = 96, H = 48, m = 8, chunks = 16;
  at::Tensor dw = at::zeros({V, H}, at::kFloat);
  at::Tensor ref = at::zeros({V, H}, at::kDouble);
  for (int64_t c = 0; c < chunks; ++c) {
    const auto dl = at::randn({m, V}).to(at::kBFloat16);
    const auto hc = at::randn({m, H}).to(at::kBFloat16);
    model::add_head_weight_grad(dw, dl, hc);
    ref += at::mm(dl.to(at::kDouble).t(), hc.to(at::kDouble));
  }
  const double err = (dw.to(at::kDouble) - ref).abs().max().item<double>();
  const double scale = ref.abs().max().item<double>();
  EXPECT_LT(err, 1e-5 * scale) << "a chunk's product was rounded below fp32";
  // The fp32 path is the same sum.
  at::Tensor dw32 = at::zeros({V, H}, at::kFloat);
  const auto dl = at::randn({m, V}), hc = at::randn({m, H});
  model::add_head_weight_grad(dw32, dl, hc);
  EXPECT_TRUE(at::allclose(dw32, at::mm(dl.t(), hc), 1e-5, 1e-5));
}
