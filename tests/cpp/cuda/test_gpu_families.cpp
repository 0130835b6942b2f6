// The model families on the GPU: each family's forward (its norms, q/k norms, soft-caps, local
// RoPE, partial rotary, merged checkpoint projections) on CUDA equals the CPU's in fp32, and in
// bf16 within bf16's rounding, on the composite and the fused layer paths, packed rows included.
// Skipped, with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "gpu_skip.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include "model/family_logits.h"
#endif

TEST(GpuFamilies, EachFamilysForwardOnCudaEqualsTheCpus) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  at::manual_seed(0);
  using namespace shardtrain;
  using test::family_logits;
  const at::Device gpu(at::kCUDA, 0);
  for (const auto& [name, m] : test::family_cases()) {
    const at::Tensor ref = family_logits(m, at::kCPU, at::kFloat, false);
    for (const bool fused : {false, true}) {
      const double fp32 =
          (family_logits(m, gpu, at::kFloat, fused) - ref).abs().max().item<double>();
      const at::Tensor bf = family_logits(m, gpu, at::kBFloat16, fused);
      const double bf16 = ((bf - ref).norm() / ref.norm()).item<double>();
      std::printf("family %s fused %d: fp32 max |diff| %.2e, bf16 relative L2 %.2e\n", name.c_str(),
                  fused, fp32, bf16);
      EXPECT_LE(fp32, 1e-3) << name << " fused " << fused;  // TF32 may be on: fp32 matmuls differ
      EXPECT_LE(bf16, 2e-2) << name << " fused " << fused;
    }
    // The projections' GEMMs in float8 (tensorwise) where the GPU has them: every family's
    // shapes here are multiples of 16.
    if (model::fp8_device_problem(gpu).empty()) {
      const at::Tensor f8 = family_logits(m, gpu, at::kBFloat16, true, model::Fp8Mode::kTensorwise);
      const double rel = ((f8 - ref).norm() / ref.norm()).item<double>();
      std::printf("family %s fp8 tensorwise: relative L2 %.2e\n", name.c_str(), rel);
      EXPECT_LE(rel, 0.2) << name << " fp8";  // as the CPU emulation: up to 0.14 (OLMo 2)
    }
  }
#endif
}
