// The fused head + loss on CUDA in bf16, whose GEMMs write fp32 (mm.dtype / addmm.dtype_out),
// against the unfused loss in fp32 over the same bf16 values. Skipped without a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "gpu_skip.h"
#include "shardtrain/model/llama.h"
#include "shardtrain/model/lm_loss.h"

using namespace shardtrain;

TEST(Gpu, FusedBf16LossAndGradientsMatchFp32) {
  SKIP_WITHOUT_GPU_OR_CPU_MODE();
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(gpu_test_device());
  const int64_t T = 96, H = 64, V = 300;
  const at::Tensor h16 = (at::randn({1, T, H}, cuda)).to(at::kBFloat16);
  const at::Tensor w16 = (at::randn({V, H}, cuda) * 0.05).to(at::kBFloat16);
  at::Tensor labels = at::randint(V, {1, T}, cuda.dtype(at::kLong));
  labels.narrow(1, 0, 10).fill_(-100);
  // Fused, bf16, four chunks.
  const at::Tensor h = h16.clone().requires_grad_(true), w = w16.clone().requires_grad_(true);
  const at::Tensor fused = model::chunked_lm_loss(h, w, labels, 24, 1.0);
  fused.backward();
  // Unfused, fp32, over the same bf16 values.
  const at::Tensor h32 = h16.to(at::kFloat).requires_grad_(true),
                   w32 = w16.to(at::kFloat).requires_grad_(true);
  const at::Tensor ref = model::causal_lm_loss(at::matmul(h32, w32.t()), labels, false).sum;
  ref.backward();
  const double l = fused.item<double>(), r = ref.item<double>();
  EXPECT_NEAR(l, r,
              1e-3 * std::abs(r));  // the same bf16 inputs, fp32 products and sums on both sides
  const auto rel = [](const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kFloat) - b).norm().item<double>() / b.norm().item<double>();
  };
  EXPECT_EQ(w.grad().scalar_type(), at::kBFloat16);
  EXPECT_LT(rel(h.grad(), h32.grad()), 1e-2);  // bf16 gradients: about 3 significant digits
  EXPECT_LT(rel(w.grad(), w32.grad()), 1e-2);
}
