// Batched decoding with a KV cache on the GPU: on a small random model the bf16 greedy answers
// equal the CPU's fp32 ones on their first tokens (bf16 rounding may split a near tie later), a
// row's bf16 answer does not depend on its batch (but where a GEMM of another shape rounds a near
// tie the other way: 2 rows of 16 allowed), and the fp32 GPU answers equal the CPU's.
// Skipped, with the reason printed, without a GPU.
#include <gtest/gtest.h>

#include "gpu_skip.h"
#ifdef SHARDTRAIN_TORCH_CUDA
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "shardtrain/model/generate.h"
#include "shardtrain/model/params.h"
#endif

TEST(GpuGenerate, CachedDecodingAgreesWithTheCpuAndAcrossBatches) {
  SKIP_WITHOUT_GPU();
#ifdef SHARDTRAIN_TORCH_CUDA
  using namespace shardtrain;
  model::ModelConfig cfg = model::model_preset("tiny");
  const model::ParamStore p = model::ParamStore::initialize(cfg, 5);
  std::map<std::string, at::Tensor> w;
  for (const auto& [name, t] : p.named()) w[name] = t;
  const at::Device gpu(at::kCUDA, 0);
  const model::Decoder cpu32(cfg, w, {}, {}, at::kCPU, at::kFloat);
  const model::Decoder gpu32(cfg, w, {}, {}, gpu, at::kFloat);
  const model::Decoder gpu16(cfg, w, {}, {}, gpu, at::kBFloat16);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> q = {1};
    for (int j = 0; j < 3 + 5 * (i % 4); ++j) q.push_back((7 * i + 13 * j) % 200 + 3);
    prompts.push_back(q);
  }
  const std::vector<uint64_t> seeds(prompts.size(), 0);
  model::GenerateConfig g;
  g.max_new_tokens = 24;
  g.stop_ids = {};
  g.batch = 16;
  const auto want = model::generate(cpu32, prompts, seeds, g);
  const auto fp32 = model::generate(gpu32, prompts, seeds, g);
  const auto bf16 = model::generate(gpu16, prompts, seeds, g);
  g.batch = 1;
  const auto bf16_alone = model::generate(gpu16, prompts, seeds, g);
  int agree = 0, alike = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(fp32[i].ids, want[i].ids) << "row " << i;
    alike += bf16[i].ids == bf16_alone[i].ids;
    agree += std::vector<int32_t>(bf16[i].ids.begin(), bf16[i].ids.begin() + 4) ==
             std::vector<int32_t>(want[i].ids.begin(), want[i].ids.begin() + 4);
  }
  EXPECT_GE(alike, 14) << "bf16 rows decoded alone differ from the batch's in " << 16 - alike;
  EXPECT_GE(agree, 14) << "bf16's first 4 tokens equal fp32's in only " << agree << " of 16 rows";
#endif
}
