// Faster paths of the model against the plain ones they replace: same values, same gradients.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "shardtrain/model/llama.h"

using namespace shardtrain;

namespace {
struct Grads {
  at::Tensor out, dq, dk, dv;
};
Grads attention_grads(const at::Tensor& q0, const at::Tensor& k0, const at::Tensor& v0, bool native) {
  auto q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
  auto out = causal_attention(q, k, v, native);
  (out.to(at::kFloat) * at::linspace(-1, 1, out.numel()).view(out.sizes())).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}
}  // namespace

// SDPA's enable_gqa against K and V repeated per query head (Hugging Face's repeat_kv).
TEST(ModelKernels, NativeGroupedQueryAttentionEqualsRepeatedKv) {
  at::manual_seed(3);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const auto opt = at::TensorOptions().dtype(dtype);
    auto q = at::randn({2, 8, 33, 16}, opt), k = at::randn({2, 2, 33, 16}, opt), v = at::randn({2, 2, 33, 16}, opt);
    const auto a = attention_grads(q, k, v, true), b = attention_grads(q, k, v, false);
    const double tol = dtype == at::kFloat ? 1e-6 : 2e-2;
    EXPECT_TRUE(at::allclose(a.out.to(at::kFloat), b.out.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_TRUE(at::allclose(a.dq.to(at::kFloat), b.dq.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_TRUE(at::allclose(a.dk.to(at::kFloat), b.dk.to(at::kFloat), tol, tol)) << dtype;  // summed over the 4 query heads
    EXPECT_TRUE(at::allclose(a.dv.to(at::kFloat), b.dv.to(at::kFloat), tol, tol)) << dtype;
    EXPECT_EQ(a.dk.sizes(), k.sizes());
  }
  // Multi-head attention (nkv == nh) takes neither path.
  auto q = at::randn({1, 4, 9, 8}), k = at::randn({1, 4, 9, 8}), v = at::randn({1, 4, 9, 8});
  EXPECT_TRUE(at::equal(causal_attention(q, k, v, true), causal_attention(q, k, v, false)));
}
